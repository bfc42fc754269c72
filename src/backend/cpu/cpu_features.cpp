#include "backend/cpu/cpu_features.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace mlxcel::cpu {
namespace {

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports checks CPUID and, for AVX/AVX-512, that the OS saves the wider
  // registers (XGETBV), so a kernel never faults on a VM that hides them.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

CpuIsa resolve_isa(const char* override_value, const CpuFeatures& features) {
  if (override_value == nullptr || override_value[0] == '\0') {
    return features.avx2_path() ? CpuIsa::kAvx2 : CpuIsa::kScalar;
  }
  if (std::strcmp(override_value, "scalar") == 0) return CpuIsa::kScalar;
  if (std::strcmp(override_value, "avx2") == 0) {
    MLXCEL_CHECK(features.avx2_path(), ErrorCategory::kUnsupported,
                 "MLXCEL_CPU_ISA=avx2: this CPU lacks AVX2/FMA/F16C; unset it or use "
                 "MLXCEL_CPU_ISA=scalar");
    return CpuIsa::kAvx2;
  }
  throw_error(ErrorCategory::kBadInput, "MLXCEL_CPU_ISA='" + std::string(override_value) +
                                            "' is not known (use scalar or avx2)");
}

CpuIsa active_isa() {
  static const CpuIsa isa = resolve_isa(std::getenv("MLXCEL_CPU_ISA"), cpu_features());
  return isa;
}

bool isa_supported(CpuIsa isa) {
  return isa == CpuIsa::kScalar || cpu_features().avx2_path();
}

std::string_view isa_name(CpuIsa isa) { return isa == CpuIsa::kAvx2 ? "avx2" : "scalar"; }

}  // namespace mlxcel::cpu
