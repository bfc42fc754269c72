#pragma once
// The gated activations' nonlinearity (SwiGLU's SiLU, GeGLU's tanh GELU) of gated_kernel
// (elementwise.cu), kept apart for any kernel that computes a gated input itself and must give
// the same bits. Products and sums are spelled __fmul_rn / __fadd_rn so that no compiler
// contraction decides them.
#include "backend/backend.h"
#include "backend/gpu/common.cuh"

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

// out = round(round(act(g)) * u): gated_kernel's element.
template <typename T>
__device__ __forceinline__ T gated_value(int act, T g, T u, int round) {
  const float v = rnd(activate(act, to_f32(g)), round);
  return from_f32<T>(rnd(v * to_f32(u), round));
}

}  // namespace mlxcel::gpu
