#pragma once
// CPU reference matmuls over MLX-quantized weights (MLX_FORMATS.md §3). Only the second operand
// is quantized. Every dequantized weight is the fp32 value scale*q + bias (affine, unfused) or
// elem*scale (fp modes); products accumulate in double and round once to the output dtype, so an
// optimized kernel can be checked against these with an fp32 error bound.
#include <optional>

#include "core/tensor.h"
#include "quant/quant_params.h"

namespace mlxcel {

// transpose = true (every Linear): w packs [..., N, K] along K and y = x @ dequant(w)^T.
// transpose = false: w packs [..., K, N] along N and y = x @ dequant(w).
// x is [..., M, K]; batch dims broadcast when both have ndim > 2. Output dtype: for affine
// promote(x, scales) (F32 when they differ), for the fp modes x's dtype.
Tensor quantized_matmul(const Tensor& x, const Tensor& w, const Tensor& scales, const Tensor* biases,
                        bool transpose, const QuantParams& p,
                        std::optional<float> global_scale = std::nullopt);

// MoE gather (mx.gather_qmm): lhs/rhs indices (U32/I32/I64) are flat indices into the batch dims
// of x and of w; a missing index defaults to arange over that batch. The indices broadcast
// together and out.shape = idx.shape + [M, N].
Tensor gather_qmm(const Tensor& x, const Tensor& w, const Tensor& scales, const Tensor* biases,
                  const Tensor* lhs_indices, const Tensor* rhs_indices, bool transpose,
                  const QuantParams& p);

// QuantizedEmbedding lookup: rows of weight/scales/biases gathered by token id and dequantized
// exactly as mx.dequantize does (output dtype: scales dtype for affine, BF16 for fp modes).
Tensor quantized_embedding(const Tensor& ids, const Tensor& w, const Tensor& scales,
                           const Tensor* biases, const QuantParams& p);

// QuantizedEmbedding.as_linear: logits = h @ E^T with the embedding's own parameters.
Tensor as_linear(const Tensor& h, const Tensor& w, const Tensor& scales, const Tensor* biases,
                 const QuantParams& p);

namespace quant {
// Decodes packed row `row` of a quantized 2-D matrix (w, scales, biases already sliced to one
// matrix and contiguous) into `out[0..K)` as fp32 values.
void decode_row_f32(const Tensor& w, const Tensor& scales, const Tensor* biases, const QuantParams& p,
                    std::int64_t row, float* out);
}  // namespace quant

}  // namespace mlxcel
