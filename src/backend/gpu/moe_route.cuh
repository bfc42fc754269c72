#pragma once
// mlx-lm's SwitchGLU routing of one token by one warp, shared by moe.cu's moe_route_kernel and
// the router GEMV that routes in its last block (linear.cu, kernels::linear_route): softmax over
// the E router logits in fp32, rounded; the top k in descending probability, ties to the larger
// expert index (mx.argpartition's (value, index) ordering keeps the last k); optional
// renormalization by their rounded sum. Deterministic and independent of the batch.
//
// prob (E floats of shared memory) is touched only by its owner lane: lane l holds the experts
// l, l + warp, ..., computes their probabilities and marks a chosen one taken, so the warp
// needs no barrier (and a block may route several tokens at once, one per warp).
#include <cstdint>

#include "backend/gpu/common.cuh"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {

// A router logit; Coherent: written by other blocks of the running kernel (read past L1).
template <typename T, bool Coherent>
__device__ __forceinline__ float load_logit(const T* p, std::int64_t i) {
  if constexpr (Coherent)
    return load_coherent(p, i);
  else
    return to_f32(p[i]);
}

template <typename T, bool Coherent = false>
__device__ __forceinline__ void route_token(const T* in, std::int64_t E, int K, int norm,
                                            std::int32_t* experts, float* weights, int round,
                                            float* prob) {
  const int lane = threadIdx.x % MLXCEL_WARP_SIZE;
  float mx = -INFINITY;
  for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE)
    mx = fmaxf(mx, load_logit<T, Coherent>(in, e));
  mx = warp_max(mx);
  float z = 0.0f;
  for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE) {
    const float v = expf(load_logit<T, Coherent>(in, e) - mx);
    prob[e] = v;
    z += v;
  }
  z = warp_sum(z);
  const float inv = 1.0f / z;
  for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE) prob[e] = rnd(prob[e] * inv, round);
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) {
    float best = -1.0f;
    int bi = -1;
    for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE) {
      const float v = prob[e];
      if (v > best || (v == best && e > bi)) {
        best = v;
        bi = static_cast<int>(e);
      }
    }
#pragma unroll
    for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1) {
      const float ov = gpu_shfl_xor(best, off);
      const int oi = gpu_shfl_xor(bi, off);
      if (ov > best || (ov == best && oi > bi)) {
        best = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      experts[j] = bi;
      weights[j] = best;
    }
    if (bi % MLXCEL_WARP_SIZE == lane) prob[bi] = -2.0f;  // taken (probabilities are >= 0)
    sum += best;
  }
  if (norm && lane == 0) {
    const float sr = rnd(sum, round);
    for (int j = 0; j < K; ++j) weights[j] = rnd(weights[j] / sr, round);
  }
}

}  // namespace mlxcel::gpu
