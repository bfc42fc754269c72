#pragma once
// Shared helpers for the CPU op conformance tests: typed random buffers, f32 views, the ISAs to
// run, and error bounds in units of the output dtype's rounding step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/error.h"

namespace mlxcel::test {

inline const std::vector<DType>& float_types() {
  static const std::vector<DType> t = {DType::kF32, DType::kBF16, DType::kF16};
  return t;
}

inline const std::vector<cpu::CpuIsa>& all_isas() {
  static const std::vector<cpu::CpuIsa> v = {cpu::CpuIsa::kScalar, cpu::CpuIsa::kAvx2};
  return v;
}

// Unit roundoff of the dtype (half an ulp at 1.0).
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    default: return std::ldexp(1.0, -24);
  }
}

// A typed buffer of n values drawn from N(0, scale), plus its exact f32 image.
struct Buf {
  DType dtype = DType::kF32;
  std::vector<std::uint8_t> bytes;
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }
  std::int64_t size() const { return static_cast<std::int64_t>(bytes.size() / dtype_size(dtype)); }
  float get(std::int64_t i) const {
    switch (dtype) {
      case DType::kBF16: return reinterpret_cast<const bf16*>(bytes.data())[i].to_float();
      case DType::kF16: return reinterpret_cast<const f16*>(bytes.data())[i].to_float();
      default: return reinterpret_cast<const float*>(bytes.data())[i];
    }
  }
  void set(std::int64_t i, float v) {
    switch (dtype) {
      case DType::kBF16: reinterpret_cast<bf16*>(bytes.data())[i] = bf16(v); break;
      case DType::kF16: reinterpret_cast<f16*>(bytes.data())[i] = f16(v); break;
      default: reinterpret_cast<float*>(bytes.data())[i] = v; break;
    }
  }
  std::vector<float> f32() const {
    std::vector<float> out(static_cast<std::size_t>(size()));
    for (std::int64_t i = 0; i < size(); ++i) out[i] = get(i);
    return out;
  }
};

inline Buf make_buf(DType t, std::int64_t n) {
  Buf b;
  b.dtype = t;
  b.bytes.assign(static_cast<std::size_t>(n) * dtype_size(t), 0);
  return b;
}

inline Buf random_buf(DType t, std::int64_t n, std::mt19937& rng, float scale = 1.0f) {
  Buf b = make_buf(t, n);
  std::normal_distribution<float> dist(0.0f, scale);
  for (std::int64_t i = 0; i < n; ++i) b.set(i, dist(rng));
  return b;
}

// Fills every byte with a poison pattern (NaN in every float format) so unwritten outputs show.
inline void poison(Buf& b) { std::fill(b.bytes.begin(), b.bytes.end(), 0xff); }

// Largest |got - want| / (rel * |want| + abs), over indices in `idx` (or all); must be <= 1.
inline double worst_ratio(const Buf& got, const Buf& want, double rel, double abs,
                          const std::vector<std::int64_t>* idx = nullptr) {
  double worst = 0;
  const std::int64_t n = idx ? static_cast<std::int64_t>(idx->size()) : want.size();
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t i = idx ? (*idx)[t] : t;
    const double g = got.get(i), w = want.get(i);
    if (std::isnan(g) != std::isnan(w)) return INFINITY;
    if (std::isnan(w)) continue;
    worst = std::max(worst, std::fabs(g - w) / (rel * std::fabs(w) + abs));
  }
  return worst;
}

#define MLXCEL_SKIP_IF_NO_ISA(isa)                                                            \
  do {                                                                                        \
    if (!::mlxcel::cpu::isa_supported(isa)) {                                                 \
      GTEST_SKIP() << "skipped: " << ::mlxcel::cpu::isa_name(isa) << " not supported on this CPU"; \
    }                                                                                         \
  } while (0)

inline std::string case_name(cpu::CpuIsa isa, DType t) {
  return std::string(cpu::isa_name(isa)) + "/" + std::string(dtype_name(t));
}

}  // namespace mlxcel::test
