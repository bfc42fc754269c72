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

// mx.sin / mx.cos: Cephes single-precision sin/cos (reduction by pi/4 in three parts, a
// polynomial per octant), as MLX's simd::sincos evaluates them.
inline float sincos(float in, bool sine) {
  bool sign_sin = in < 0;
  const float ax = std::fabs(in);
  float y = ax * 1.27323954473516f;  // 4 / pi
  std::uint32_t j = static_cast<std::uint32_t>(y);
  j = (j + 1) & ~1u;
  y = static_cast<float>(j);
  const bool poly = (j & 2) != 0;
  float x = std::fma(y, -0.78515625f, ax);
  x = std::fma(y, -2.4187564849853515625e-4f, x);
  x = std::fma(y, -3.77489497744594108e-8f, x);
  sign_sin = sign_sin != ((j & 4) != 0);
  const bool sign_cos = ((j - 2) & 4) != 0;
  const float z = x * x;
  float y1 = std::fma(z, 2.443315711809948e-5f, -1.388731625493765e-3f);
  float y2 = std::fma(z, -1.9515295891e-4f, 8.3321608736e-3f);
  y1 = std::fma(y1, z, 4.166664568298827e-2f);
  y2 = std::fma(y2, z, -1.6666654611e-1f);
  y1 = y1 * z;
  y2 = y2 * z;
  y1 = y1 * z;
  y2 = std::fma(x, y2, x);
  y1 = std::fma(z, -0.5f, y1);
  y1 = y1 + 1.0f;
  if (sine) {
    const float ys = poly ? y1 : y2;
    return sign_sin ? -ys : ys;
  }
  const float yc = poly ? y2 : y1;
  return sign_cos ? yc : -yc;
}
inline float sin(float x) { return sincos(x, true); }
inline float cos(float x) { return sincos(x, false); }

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
  const float x3 = round_to(t, std::pow(x, 3.0f));  // mx.power: glibc powf, rounded once
  float u = round_to(t, x + round_to(t, k * x3));
  u = round_to(t, c * u);
  const float th = round_to(t, std::tanh(u));
  return round_to(t, round_to(t, 0.5f * x) * round_to(t, 1.0f + th));
}

}  // namespace mlxcel::cpu::mlx_compat
