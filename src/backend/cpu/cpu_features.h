#pragma once
// Run-time CPU feature detection and the instruction-set choice for the CPU kernels.
// The binary is built for baseline x86-64; AVX2 kernels live in backend/cpu/avx2/ (compiled with
// -mavx2 -mfma -mf16c) and run only when the CPU reports AVX2, FMA and F16C and the user did not
// force the scalar path with MLXCEL_CPU_ISA=scalar.
#include <cstdint>
#include <string_view>

namespace mlxcel::cpu {

enum class CpuIsa : std::uint8_t {
  kScalar = 0,  // portable C++ (the compiler may still auto-vectorize for SSE2)
  kAvx2 = 1,    // AVX2 + FMA + F16C
};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  // All three AVX2-path requirements together.
  bool avx2_path() const { return avx2 && fma && f16c; }
};

// Detected once (thread-safe static), immutable afterwards.
const CpuFeatures& cpu_features();

// Resolves the requested ISA against the hardware: an empty / null override means "best
// available"; "scalar" forces the fallback; "avx2" asks for AVX2 and throws kUnsupported when the
// CPU lacks it (so a test that forces it cannot silently run the scalar path). Anything else is
// kBadInput.
CpuIsa resolve_isa(const char* override_value, const CpuFeatures& features);

// The process default: resolve_isa(getenv("MLXCEL_CPU_ISA"), cpu_features()), computed once.
CpuIsa active_isa();

// True when kernels for `isa` can run on this CPU.
bool isa_supported(CpuIsa isa);

std::string_view isa_name(CpuIsa isa);

}  // namespace mlxcel::cpu
