#pragma once
// Dense matmul on the CPU, nn.Linear semantics as MLX stores it (weight [out, in]):
//   y[M, N] = x[M, K] · W[N, K]^T (+ bias[N])
// x and y rows may be strided (x_row_stride, y_row_stride in elements, >= K / >= N); W is
// contiguous [N, K]. x, W, bias and y dtypes are each F32, BF16 or F16 (bias has W's dtype);
// products are accumulated in f32 and rounded once to y's dtype.
//
// matmul_ref is the scalar, single-threaded oracle (double accumulation). matmul is the
// optimized kernel, row-stable: y[m][n] is bit-identical whatever M is, whichever row m it is
// and however the work is split over threads (backend/cpu/dot_kernels.h). Each output is one
// 8-lane fp32 FMA chain over K; calls of up to 4 rows of x share every W vector they load (M <= 4
// streams W once), larger M runs 3-row register tiles with x blocks held in L1; threads split
// N (and M when N is small).
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace mlxcel::cpu {

struct MatmulArgs {
  const void* x = nullptr;
  DType x_dtype = DType::kF32;
  std::int64_t x_row_stride = 0;  // 0 means K
  const void* w = nullptr;
  DType w_dtype = DType::kF32;
  const void* bias = nullptr;  // [N] of w_dtype, or nullptr
  void* y = nullptr;
  DType y_dtype = DType::kF32;
  std::int64_t y_row_stride = 0;  // 0 means N
  std::int64_t m = 0, n = 0, k = 0;
};

void matmul_ref(const MatmulArgs& a);
void matmul(const MatmulArgs& a, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

// Tensor form: x [..., K] (rows may be strided), w [N, K] contiguous, bias [N] or undefined.
// Returns y [..., N] in x's dtype.
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias = Tensor(),
              CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
