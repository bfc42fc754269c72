#pragma once
// Scalar functions with the exact arithmetic of MLX's CPU backend (mlx 0.32.4 from PyPI, the
// reference the model conformance gate runs), for `--numerics mlx`. Each was found by experiment
// against live MLX and is checked bit for bit by tests/python/test_mlx_compat.py. `t` is the
// activation dtype (F32, BF16 or F16): MLX computes each op in fp32 and rounds its result to t.
#include <cmath>
#include <cstdint>

#include "core/dtype.h"

namespace mlxcel::cpu::mlx_compat {

inline float round_to(DType t, float v) {
  switch (t) {
    case DType::kBF16: return bf16(v).to_float();
    case DType::kF16: return f16(v).to_float();
    default: return v;
  }
}

// mx.exp: Cephes-style 2^x with a degree-6 polynomial on the fraction (MLX's simd::exp).
inline float exp(float x) {
  const float y = x * 1.442695f;
  const float ipart = std::floor(y + 0.5f);
  const float fpart = y - ipart;
  float p = 1.535336188319500e-4f;
  p = std::fma(p, fpart, 1.339887440266574e-3f);
  p = std::fma(p, fpart, 9.618437357674640e-3f);
  p = std::fma(p, fpart, 5.550332471162809e-2f);
  p = std::fma(p, fpart, 2.402264791363012e-1f);
  p = std::fma(p, fpart, 6.931472028550421e-1f);
  p = std::fma(p, fpart, 1.0f);
  if (std::isnan(x)) return x;
  if (x > 88.0f) return INFINITY;
  if (x < -88.0f) return 0.0f;
  const std::uint32_t bits = static_cast<std::uint32_t>(static_cast<std::int32_t>(ipart) + 127) << 23;
  float two;
  __builtin_memcpy(&two, &bits, sizeof two);
  return two * p;
}

// mx.sigmoid: e = t(exp(|x|)), y = 1 / (1 + e), x < 0 ? y : 1 - y, rounded to t.
inline float sigmoid(float x, DType t) {
  const float e = round_to(t, exp(std::fabs(x)));
  const float y = 1.0f / (1.0f + e);
  return round_to(t, x < 0 ? y : 1.0f - y);
}

// nn.silu(x) = x * sigmoid(x), two ops.
inline float silu(float x, DType t) { return round_to(t, x * sigmoid(x, t)); }

// nn.gelu_approx: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))) op by op, the Python
// constants taking the array's dtype first.
inline float gelu_approx(float x, DType t) {
  const float c = round_to(t, 0.7978845608028654f), k = round_to(t, 0.044715f);
  const float x3 = round_to(t, x * x * x);
  float u = round_to(t, x + round_to(t, k * x3));
  u = round_to(t, c * u);
  const float th = round_to(t, std::tanh(u));
  return round_to(t, round_to(t, 0.5f * x) * round_to(t, 1.0f + th));
}

}  // namespace mlxcel::cpu::mlx_compat
