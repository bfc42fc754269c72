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

// A linear's fused input norm (backend::LinearArgs::norm_*): p.x = rms_norm(src) * w, rows of
// the product's K.
struct NormIn {
  const void* src = nullptr;
  std::int64_t stride = 0;
  const float* w = nullptr;
  float eps = 0.0f;
};

// The norm and the decode GEMV as one launch, for a matrix qgemv_mma would take with its
// one-group-per-lane kernel at 1-2 rows (the decode step's q/k/v and gate/up products): every
// block normalizes the rows into shared memory itself, with rms_norm_act_kernel's exact
// reduction order (so x and y have the two launches' bits), and the first block also writes x.
// False: nothing launched (the caller runs rms_norm, then linear). MLXCEL_GPU_FUSED_NORM=1: on
// (off by default: run 34 measured the 8B 10 % slower with it).
template <typename T>
bool qgemv_mma_norm(const LinParams& p, const NormIn& n, const Stream& s);

// The MoE decode step's down projection with its neighbours folded in (moe.cu):
//  - GatedIn: x row r = gated_value(act, g row r, u row r) (the gated activation of the gate and
//    up products), computed by each block into shared memory instead of read from p.x;
//  - CombineOut: out[t] (+)= the top_k rows' products weighted and summed in j order, exactly
//    moe_combine_kernel; the last of a token's top_k blocks of a column block (an atomic count
//    in `counters`, zero before and after every launch) sums that column block.
struct GatedIn {
  const void* g = nullptr;
  const void* u = nullptr;
  std::int64_t g_stride = 0, u_stride = 0;
  int act = 0;
};
struct CombineOut {
  int* counters = nullptr;
  std::int64_t max_counters = 0;  // ints at counters
  std::int64_t col_blocks = 0;    // set by the launch: a token's counters
  const float* w = nullptr;       // [tokens, top_k] combine weights
  void* out = nullptr;
  std::int64_t out_stride = 0;
  int top_k = 1;
  bool accumulate = false;
};

// A dense linear's gated input (backend::LinearArgs::gated_in) and the decode GEMV as one
// launch, for a matrix qgemv_mma would take with its one-group-per-lane kernel at 1-2 rows (the
// down projection): every block computes x into shared memory, the first also into p.x. False:
// nothing launched (the caller runs gated_activation, then linear). MLXCEL_GPU_FUSED_GATED=1: on
// (off by default: run 34 measured the 8B 7 % slower with it).
template <typename T>
bool qgemv_mma_gated(const LinParams& p, const GatedIn& gi, const Stream& s);

// Expert-indexed rows (p.experts, x_div 1: row t * top_k + j) over affine 4-bit weights, one
// launch for the gated activation, the down GEMV (ys rows into p.y, as the unfused launch
// stores them) and the combine. False: nothing launched (the caller runs the three launches).
// MLXCEL_GPU_MOE_FUSED_DOWN=1: on (off by default: run 34 measured the 30B 4 % slower with it).
template <typename T>
bool qgemv_mma_moe_down(const LinParams& p, const GatedIn& gi, const CombineOut& co,
                        const Stream& s);
namespace kernels {
// The fused down projection for moe.cu: `a` is the down linear over expert rows (its x the gate
// product's buffer, not read); launches qgemv_mma_moe_down where linear would give `a` to the
// matrix-unit GEMV (affine 4-bit, aligned, not grouped). False: nothing launched.
bool linear_moe_down(const ExpertLinear& a, const GatedIn& gi, const CombineOut& co,
                     const Stream& s);  // linear.cu
}  // namespace kernels

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
