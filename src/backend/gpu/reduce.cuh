#pragma once
// Warp/wave and block reductions over the compat shuffles. Width comes from MLXCEL_WARP_SIZE,
// a per-target constant (32 on NVIDIA and RDNA, 64 on GCN/CDNA).
#include <cstdint>

#include "backend/gpu/compat.h"

namespace mlxcel::gpu {

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1) v += gpu_shfl_xor(v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1) v = fmaxf(v, gpu_shfl_xor(v, off));
  return v;
}

// The largest 32-bit key of the warp, on every lane: one redux.sync on sm_80+, else a butterfly.
__device__ __forceinline__ std::uint32_t warp_max_key(std::uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, v);
#else
#pragma unroll
  for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1) {
    const std::uint32_t o = gpu_shfl_xor(v, off);
    v = o > v ? o : v;
  }
  return v;
#endif
}

// Sum over a block of kBlock threads; every thread gets the result.
template <int kBlock>
__device__ __forceinline__ float block_sum(float v) {
  constexpr int kWarps = kBlock / MLXCEL_WARP_SIZE;
  __shared__ float partial[kWarps];
  v = warp_sum(v);
  const int lane = threadIdx.x % MLXCEL_WARP_SIZE;
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kWarps; ++i) total += partial[i];
  __syncthreads();  // partial[] may be reused by a following call
  return total;
}

}  // namespace mlxcel::gpu
