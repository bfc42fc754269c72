#pragma once
// What the two tensor-core decode GEMVs share (CUDA sm_80+): qgemv_mma.cu's register-fed kernels
// and qgemv_bulk.cu's bulk-copy pipeline, which must compute each output with the same
// arithmetic so that a row's result does not depend on which of them ran (batch invariance).
#include <cstdint>

#include "backend/gpu/linear.cuh"

#if defined(MLXCEL_GPU_CUDA)
namespace mlxcel::gpu::qmma {

constexpr int kWarps = 8;       // warps per block
constexpr int kTileCols = 16;   // output columns per warp: the mma's M

struct MmaParams {
  LinParams p;
  int ks = 1;                   // warps per column tile, splitting the groups of K
  std::int64_t groups = 0;      // groups per row: k / group_size
  std::int64_t col_block0 = 0;  // the first column block of this launch
};

// Warps per column tile: depends on the matrix only (batch invariance); qgemv_mma.cu.
int choose_ks(std::int64_t tiles, std::int64_t groups);

// The bf16 / f16 pair (off, off) and its offset: OR-ing a 4-bit code into each half's low
// mantissa bits reads as off + c, exactly.
template <typename T>
struct Magic;
template <>
struct Magic<bf16> {
  static constexpr std::uint32_t kPair = 0x43004300u;  // (128, 128)
  static constexpr std::uint32_t kOnes = 0x3F803F80u;  // (1, 1)
  static constexpr float kOff = 128.0f;
};
template <>
struct Magic<f16> {
  static constexpr std::uint32_t kPair = 0x64006400u;  // (1024, 1024)
  static constexpr std::uint32_t kOnes = 0x3C003C00u;  // (1, 1)
  static constexpr float kOff = 1024.0f;
};

// Codes i and i + 4 of a packed word as the pair (off + c_i, off + c_{i+4}).
template <typename T>
__device__ __forceinline__ std::uint32_t code_pair(std::uint32_t w, int i) {
  return ((w >> (4 * i)) & 0x000F000Fu) | Magic<T>::kPair;
}

// Element i (0 or 1) of a 4-byte word of two 16-bit scale codes (code 1: bf16, 2: f16).
__device__ __forceinline__ float code_value(std::uint32_t word, int code, int i) {
  if (code == 0) return __uint_as_float(word);
  const std::uint32_t h = i ? word >> 16 : word & 0xFFFFu;
  return code == 1 ? __uint_as_float(h << 16)
                   : f16::from_bits(static_cast<std::uint16_t>(h)).to_float();
}

// The end of a column tile in the one-group-per-lane kernels, shared so both fold alike. Each
// lane's acc[q] holds (row g, group j0), (g, j0 + 1), (g + 8, j0), (g + 8, j0 + 1) of row pair q:
// per row (j0 + j1) of the even lane t, then + (j2 + j3) of its odd partner, into `red`
// (kWarps x NP x 2 x 32 floats) ...
template <int NP>
__device__ __forceinline__ void fold_groups(const float (&acc)[NP][4], float* red, int warp,
                                            int lane) {
  const int t = lane % 4;
#pragma unroll
  for (int q = 0; q < NP; ++q)
#pragma unroll
    for (int r2 = 0; r2 < 2; ++r2) {
      const float own = acc[q][2 * r2] + acc[q][2 * r2 + 1];
      const float other = gpu_shfl_xor(own, 1);
      red[((warp * NP + q) * 2 + r2) * MLXCEL_WARP_SIZE + lane] =
          (t % 2 == 0) ? own + other : other + own;
    }
}
// ... then (after a barrier, by the even lanes of a tile's first warp) the tile's ks K slices
// of (row pair q, row half r2) added in warp order ...
template <int NP>
__device__ __forceinline__ float sum_slices(const float* red, int ks, int warp, int lane, int q,
                                            int r2) {
  float v = red[((warp * NP + q) * 2 + r2) * MLXCEL_WARP_SIZE + lane];
  for (int w = 1; w < ks; ++w) v += red[(((warp + w) * NP + q) * 2 + r2) * MLXCEL_WARP_SIZE + lane];
  return v;
}
// ... and stored for rows m0 + 2 q + t / 2 < m0 + mc and columns n0 + g (+ 8) <= n_last.
template <typename T, int NP>
__device__ __forceinline__ void sum_slices_store(const LinParams& p, int ks, const float* red,
                                                 int warp, int lane, std::int64_t n0,
                                                 std::int64_t m0, int mc, std::int64_t n_last) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int q = 0; q < NP; ++q)
#pragma unroll
    for (int r2 = 0; r2 < 2; ++r2) {
      const float v = sum_slices<NP>(red, ks, warp, lane, q, r2);
      const int row = 2 * q + t / 2;
      const std::int64_t n = n0 + g + 8 * r2;
      if (row < mc && n <= n_last) store_lin<T>(p, (m0 + row) * p.y_stride + n, n, v);
    }
}

// The one-group-per-lane GEMV (qgemv_mma_gpl_kernel's arithmetic) with weights and scales
// streamed into shared memory by bulk copies (qgemv_bulk.cu): launches and returns true for
// up to 64 rows without expert indexing on sm_90+ when the shapes, alignments and shared
// memory fit and MLXCEL_GPU_QGEMV_BULK=1 (off by default until measured); false leaves the
// work to qgemv_mma's kernels. With p.norm_w it also runs the input norm.
template <typename T>
bool qgemv_bulk(const MmaParams& mp, const Stream& s);

}  // namespace mlxcel::gpu::qmma
#endif
