#pragma once
// RMSNorm on the CPU (scalar reference). Rows are contiguous; x rows may be strided.
//   y = x * rsqrt(mean(x^2) + eps) * w, accumulated in fp32, rounded once to the output dtype.
// add_rms_norm is the fused residual form: h = x + residual (rounded to dtype, as the unfused
// add would be), y = rms_norm(h) * w; h is written back to `residual_out`.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

void rms_norm_ref(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
                  std::int64_t x_row_stride, float eps, DType dtype);

void add_rms_norm_ref(const void* x, const void* residual, const void* w, void* y,
                      void* residual_out, std::int64_t rows, std::int64_t cols, float eps,
                      DType dtype);

// Optimized twins (multithreaded over rows; AVX2 rows when isa is kAvx2). f32 accumulation, so
// they agree with the double-accumulating reference to a few output ulps.
// Gemma's (1 + w) norm is this kernel with w' = 1 + w precomputed by the caller (mlx-lm computes
// 1.0 + weight in the weight's dtype).
void rms_norm(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
              std::int64_t x_row_stride, float eps, DType dtype, CpuIsa isa = active_isa(),
              ThreadPool* pool = nullptr);
void add_rms_norm(const void* x, const void* residual, const void* w, void* y,
                  void* residual_out, std::int64_t rows, std::int64_t cols, float eps,
                  DType dtype, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
