#pragma once
// What linear.cu's kernels and qgemv_mma.cu share: the launch parameters of a (possibly
// expert-indexed) linear, and the tensor-core decode GEMV's entry point.
#include <cstdint>

#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/runtime.h"

namespace mlxcel::gpu {

struct LinParams {
  const void* x = nullptr;
  std::int64_t x_stride = 0, x_div = 1;
  WView w;
  const std::int32_t* experts = nullptr;
  const float* bias = nullptr;
  void* y = nullptr;
  std::int64_t y_stride = 0, m = 0;
  std::int64_t row_block0 = 0;  // GEMV: the first row block of this launch (grid.y <= 65,535)
  int round = 0;
  bool accumulate = false;  // y = round(y + round(x · Wᵀ + bias)) (backend::LinearArgs)
  kernels::ExpertTiles tiles;  // expert-indexed rows grouped for the GEMM (order null: none)
  // A second matrix of w's shape, format and strides over the same x rows into pair_y (the MoE
  // experts' gate and up): the decode GEMV runs both in one launch (null: none).
  const void* pair_w = nullptr;
  const void* pair_scales = nullptr;
  const void* pair_biases = nullptr;
  void* pair_y = nullptr;
};

// Output (row-major index i, column n) = round(v + bias[n]); accumulating, y[i] = round(y[i] +
// that), as the unfused add would: each element is read and written by the one thread that
// computes it, so y may be the residual stream itself.
template <typename T>
__device__ __forceinline__ void store_lin_to(T* y, const LinParams& p, std::int64_t i,
                                             std::int64_t n, float v) {
  float r = rnd(v + (p.bias ? p.bias[n] : 0.0f), p.round);
  if (p.accumulate) r = to_f32(y[i]) + r;
  store(y, i, r, p.round);
}
template <typename T>
__device__ __forceinline__ void store_lin(const LinParams& p, std::int64_t i, std::int64_t n,
                                          float v) {
  store_lin_to<T>(static_cast<T*>(p.y), p, i, n, v);
}

// Weight pointers of expert e's matrix in a stacked view.
struct WPtrs {
  const void* w;
  const void* scales;
  const void* biases;
};
__device__ __forceinline__ WPtrs expert_wptrs(const WView& v, std::int64_t e) {
  WPtrs r{v.w, v.scales, v.biases};
  r.w = static_cast<const char*>(r.w) + e * v.expert_stride_w;
  if (r.scales) r.scales = static_cast<const char*>(r.scales) + e * v.expert_stride_s;
  if (r.biases) r.biases = static_cast<const char*>(r.biases) + e * v.expert_stride_s;
  return r;
}
// Weight pointers of the matrix row m uses (its expert's, for expert-indexed rows). Spelled out
// rather than through expert_wptrs: the decode GEMVs' prologue schedules better this way.
__device__ __forceinline__ WPtrs wptrs(const LinParams& p, std::int64_t m) {
  WPtrs r{p.w.w, p.w.scales, p.w.biases};
  if (p.experts) {
    const std::int64_t e = p.experts[m];
    r.w = static_cast<const char*>(r.w) + e * p.w.expert_stride_w;
    if (r.scales) r.scales = static_cast<const char*>(r.scales) + e * p.w.expert_stride_s;
    if (r.biases) r.biases = static_cast<const char*>(r.biases) + e * p.w.expert_stride_s;
  }
  return r;
}

// Decode GEMV over affine 4-bit weights on the matrix units (qgemv_mma.cu), for a matrix that
// linear.cu's launch already gave to the qgemv path (up to 64 rows or expert-indexed rows,
// 16-byte aligned operands): launches and returns true on CUDA sm_80+ with bf16 / f16
// activations unless MLXCEL_GPU_QGEMV_MMA=0; false leaves the work to the SIMT qgemv.
template <typename T>
bool qgemv_mma(const LinParams& p, const Stream& s);

// Rows per tile of the matrix-unit GEMM (gemm_mma.cu's block tile), which moe.cu's expert
// grouping cuts each expert's rows into.
constexpr int kGemmTileRows = 128;

// Prefill GEMM on the matrix units (gemm_mma.cu) for a matrix linear.cu gives to its GEMM path
// (more rows than the GEMVs take), or for expert-indexed rows grouped into tiles (p.tiles):
// launches and returns true on CUDA sm_80+ (HIP: gfx11 WMMA, under MLXCEL_GPU_GEMM_MMA=1) with
// bf16 / f16 activations and weights quantized (any format) or dense in the activation dtype,
// 16-byte aligned x rows and K % 32 == 0; false leaves the work to the SIMT kernels.
template <typename T, int F>
bool gemm_mma(const LinParams& p, const Stream& s);

}  // namespace mlxcel::gpu
