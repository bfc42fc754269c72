#pragma once
// HF fine-grained FP8 checkpoints (quant_method "fp8", MLX_FORMATS.md §5): `X.weight` is
// F8_E4M3 [out, in], `X.weight_scale_inv` is [ceil(out/B0), ceil(in/B1)] in F32, BF16 or F16 (read
// from the header) and, despite its name, multiplies: W[i,j] = e4m3(Wq[i,j]) * s[i/B0, j/B1],
// ragged edge blocks included.
#include "core/tensor.h"
#include "quant/quantize.h"

namespace mlxcel {

struct Fp8Block {
  int rows = 128;
  int cols = 128;
};

// Checks the scale grid against the weight; throws kBadInput naming `what`.
void check_fp8_block(const Tensor& weight, const Tensor& scale_inv, Fp8Block block, const std::string& what);

// The exact product (one fp32 rounding of e4m3 * scale, as mlx-lm's sanitize computes it) rounded
// to `out_dtype`.
Tensor dequantize_fp8_block(const Tensor& weight, const Tensor& scale_inv, Fp8Block block,
                            DType out_dtype = DType::kBF16, const std::string& what = "fp8 weight");

// Dequantizes exactly to fp32 and re-quantizes to mxfp8 (E4M3 elements, E8M0 scales, groups of 32
// along `in`), a mode every backend runs natively. `in` must be a multiple of 32.
QuantizedTensor requantize_fp8_block_to_mxfp8(const Tensor& weight, const Tensor& scale_inv,
                                              Fp8Block block, const std::string& what = "fp8 weight");

}  // namespace mlxcel
