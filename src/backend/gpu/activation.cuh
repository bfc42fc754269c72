#pragma once
// The gated activations' nonlinearity, shared by elementwise.cu's gated kernel and the gated
// epilogue of qgemv_bulk.cu, which must give the same bits. Products and sums are spelled as
// __fmul_rn / __fadd_rn so that no compiler contraction can differ between the two callers.
#include "backend/backend.h"
#include "backend/gpu/compat.h"

namespace mlxcel::gpu {

__device__ __forceinline__ float activate(int act, float x) {
  if (act == static_cast<int>(backend::Activation::kGeluApprox)) {
    constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi), as nn.gelu_approx
    const float x3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    const float t = tanhf(__fmul_rn(kC, __fadd_rn(x, x3)));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
  }
  return x / (1.0f + expf(-x));
}

}  // namespace mlxcel::gpu
