#pragma once
// CPU reference quantize / dequantize, bit-identical with MLX's CPU backend (mlx 0.32, the
// oracle the tests run). Rules, as established against MLX (MLX_FORMATS.md §1.4, §2):
// - affine quantize (2..8 bits): true min/max in fp32, scale = max((max-min)/n, 1e-7), the edge of larger
//   magnitude gets q = 0 (scale negated when it is the max), rint, clamp to [0, n]; scales and
//   biases are stored in the input dtype. 1 bit: scale = max(max-min, 1e-7), bias = min.
// - fp quantize: amax = max|w| per group (NaN propagates); mx modes use the smallest power of two
//   >= amax/emax (emax 6 for fp4, 448 for fp8) as the E8M0 scale (amax = 0 -> byte 127, a
//   non-finite amax -> byte 128 with every element encoded as for NaN); nvfp4 encodes amax/6 to
//   E4M3 with RNE. Elements: fp4 is the nearest E2M1 value, ties to the lower LUT index; fp8 is
//   RNE E4M3, saturating.
// - affine dequantize computes in the scales dtype (the product and the sum each round to it);
//   fp dequantize computes in the output dtype (default BF16).
#include <optional>

#include "core/tensor.h"
#include "quant/quant_params.h"

namespace mlxcel {

struct QuantizedTensor {
  Tensor weight;   // U32 [..., N, K*bits/32]
  Tensor scales;   // [..., N, K/gs]: weight dtype (affine) or U8 (fp modes)
  Tensor biases;   // affine only; undefined otherwise
};

// Quantizes a float tensor (F32/F16/BF16, ndim >= 2, last dim divisible by group_size) along
// its last axis. `global_scale` (nvfp4 only) is MLX's optional per-tensor fp32 scale.
QuantizedTensor quantize(const Tensor& w, const QuantParams& p,
                         std::optional<float> global_scale = std::nullopt);

// Dequantizes to `out_dtype` (F32/F16/BF16). Default: the scales dtype for affine, BF16 for the
// fp modes, as mx.dequantize does; with an nvfp4 global scale the result is F32 (MLX promotes).
// Invalid fp scale bytes (fp_scale_invalid) dequantize their group to 0 where MLX gives NaN/inf.
Tensor dequantize(const Tensor& w, const Tensor& scales, const Tensor* biases, const QuantParams& p,
                  std::optional<DType> out_dtype = std::nullopt,
                  std::optional<float> global_scale = std::nullopt);

namespace quant {
// E8M0 255 and E4M3 0x7F/0xFF: scales MLX decodes to inf/NaN. mlxcel decodes them to 0.
inline bool fp_scale_invalid(QuantMode mode, std::uint8_t s) {
  return mode == QuantMode::kNvfp4 ? (s & 0x7F) == 0x7F : s == 0xFF;
}
inline float decode_fp_scale(QuantMode mode, std::uint8_t s) {
  if (fp_scale_invalid(mode, s)) return 0.0f;
  return mode == QuantMode::kNvfp4 ? fp8_e4m3_to_float(s) : fp8_e8m0_to_float(s);
}
// E4M3 elements 0x7F/0xFF are NaN in mx.dequantize; mlxcel decodes them to 0.
inline float decode_fp_elem(QuantMode mode, std::uint32_t code) {
  if (mode == QuantMode::kMxfp8) {
    return (code & 0x7Fu) == 0x7Fu ? 0.0f : fp8_e4m3_to_float(static_cast<std::uint8_t>(code));
  }
  return fp4_e2m1_to_float(static_cast<std::uint8_t>(code));
}
std::uint8_t encode_fp4_nearest(float x);  // ties to the lower E2M1 LUT index, NaN -> 0
// Smallest E8M0 power of two >= x (MLX CPU rule); x must be finite and > 0.
std::uint8_t e8m0_ceil(float x);
// Rounds a float to `t` (F32/F16/BF16) and back.
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::kBF16: return bf16(v).to_float();
    case DType::kF16: return f16(v).to_float();
    default: return v;
  }
}
// F32 / F16 / BF16 element access (other dtypes are rejected before these are reached).
inline float load_float(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return static_cast<const bf16*>(base)[i].to_float();
    case DType::kF16: return static_cast<const f16*>(base)[i].to_float();
    default: return static_cast<const float*>(base)[i];
  }
}
inline void store_float(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<bf16*>(base)[i] = bf16(v); break;
    case DType::kF16: static_cast<f16*>(base)[i] = f16(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}
}  // namespace quant

// Adversarial scale check for a loaded quantized tensor: E8M0 byte 255 (+inf in MLX), E4M3
// 0x7F/0xFF (NaN in mx.dequantize) and NaN/inf float scales or biases are rejected with
// kBadInput naming `what` and the first bad group, since MLX would turn those groups into NaN.
void check_scales(const Tensor& scales, const Tensor* biases, const QuantParams& p, const std::string& what);

}  // namespace mlxcel
