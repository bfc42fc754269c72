#pragma once
// Row-wise softmax on the CPU, numerically stable (subtract the row max), f32 accumulation:
//   y[r, c] = exp(s - max_c s) / sum_c exp(s - max_c s),  s = x[r, c] (+ mask[r, c])
// x/y rows may be strided. The optional additive mask is f32 with its own row stride (0
// broadcasts one mask row to all rows); -inf entries remove a column. A row whose entries are all
// -inf gives zeros (MLX gives NaN there; no model path produces such a row).
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

struct SoftmaxArgs {
  const void* x = nullptr;
  void* y = nullptr;
  DType dtype = DType::kF32;
  std::int64_t rows = 0, cols = 0;
  std::int64_t x_row_stride = 0;  // 0 means cols
  std::int64_t y_row_stride = 0;  // 0 means cols
  const float* mask = nullptr;
  std::int64_t mask_row_stride = 0;
};

void softmax_ref(const SoftmaxArgs& a);
void softmax(const SoftmaxArgs& a, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
