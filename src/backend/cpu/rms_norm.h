#pragma once
// RMSNorm on the CPU (scalar reference). Rows are contiguous; x rows may be strided.
//   y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32, rounded once to the output dtype.
// add_rms_norm is the fused residual form: h = x + residual (rounded to dtype, as the unfused
// add would be), y = rms_norm(h) * w; h is written back to `residual_out`.
#include <cstdint>

#include "core/dtype.h"

namespace mlxcel::cpu {

void rms_norm_ref(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
                  std::int64_t x_row_stride, float eps, DType dtype);

void add_rms_norm_ref(const void* x, const void* residual, const void* w, void* y,
                      void* residual_out, std::int64_t rows, std::int64_t cols, float eps,
                      DType dtype);

}  // namespace mlxcel::cpu
