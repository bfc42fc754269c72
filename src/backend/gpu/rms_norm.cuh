#pragma once
// The RMSNorm reduction order, shared by rms_norm.cu's kernels and the norm that qgemv_bulk.cu
// fuses into its prologue, which must produce the same bits (batch invariance: the fused norm
// runs at 1-2 rows, the separate kernel above). A row of `cols` elements is summed by B =
// norm_threads(cols) threads: thread v adds the squares of elements v, v + B, v + 2B, ... with
// fmaf in that order, each warp folds its threads by the xor butterfly of warp_sum, and the
// warps' partials are added in warp order from 0.0f; then inv = 1 / sqrtf(ss / cols + eps) and
// y = round(round(x * inv) * w).
#include <cstdint>

namespace mlxcel::gpu {

constexpr int kNormHeld = 8;  // elements a norm thread keeps in registers (then a loop)

// Threads per row: 256 up to 2048 columns, else 1024 (a 4096-wide row in 4 loads per thread).
__host__ __device__ constexpr int norm_threads(std::int64_t cols) { return cols <= 2048 ? 256 : 1024; }

}  // namespace mlxcel::gpu
