#pragma once
// Launchers of the GpuBackend's op kernels, one .cu per op family. Arguments are the op layer's
// structs (backend/backend.h) with device pointers; every launcher is asynchronous on `s` and
// checks its launch (device_fault naming the op).
#include <cstddef>

#include "backend/backend.h"
#include "backend/gpu/runtime.h"

namespace mlxcel::gpu::kernels {

// True when a kernel exists for this weight format (linear, embed, moe experts).
bool weight_format_supported(backend::QMode mode, DType w_dtype, int bits, int group_size,
                             DType scales_dtype);

void embed(const backend::EmbedArgs& a, const Stream& s);                       // embed.cu
void gather_rows(const backend::GatherRowsArgs& a, const Stream& s);            // embed.cu
void rms_norm(const backend::RmsNormArgs& a, const Stream& s);                  // rms_norm.cu
void add_rms_norm(const backend::AddRmsNormArgs& a, const Stream& s);           // rms_norm.cu
void add(const backend::AddArgs& a, const Stream& s);                           // elementwise.cu
void gated_activation(const backend::GatedActivationArgs& a, const Stream& s);  // elementwise.cu
void linear(const backend::LinearArgs& a, const Stream& s);                     // linear.cu
void rope_kv_append(const backend::RopeKvAppendArgs& a, const Stream& s);       // rope.cu
// Attention's workspace: `bytes` of device memory (0: none needed) whose first `zeroed_bytes`
// must be zero when first handed out (the kernels leave them zero).
struct AttentionWorkspace {
  std::size_t bytes = 0, zeroed_bytes = 0;
};
AttentionWorkspace attention_workspace(const backend::AttentionArgs& a);
void attention(const backend::AttentionArgs& a, void* workspace, const Stream& s);  // attention.cu
void moe_route(const backend::MoeRouteArgs& a, const Stream& s);                // moe.cu
void sample(const backend::SampleArgs& a, const Stream& s);                     // sample.cu
// Scratch: moe_experts_scratch_bytes(a) bytes of device memory.
std::size_t moe_experts_scratch_bytes(const backend::MoeExpertsArgs& a);
void moe_experts(const backend::MoeExpertsArgs& a, void* scratch, const Stream& s);  // moe.cu

// Expert-indexed rows grouped by expert for the matrix-unit GEMM (moe.cu builds them on the
// device from the router's choices). Tile i of the GEMM's grid takes the `rows` (<= 128) row
// indices order[first .. first + rows) of matrix `expert`; tiles i >= *tile_count are empty.
struct ExpertTile {
  std::int32_t expert, first, rows, unused;
};
struct ExpertTiles {
  const std::int32_t* order = nullptr;  // the R expert-indexed rows, grouped by expert
  const ExpertTile* tiles = nullptr;    // max_tiles entries, the first *tile_count filled
  const std::int32_t* tile_count = nullptr;
  std::int64_t max_tiles = 0;
};

// Expert-indexed linear (moe.cu uses it): row m of y = x[m / x_div] · W[experts[m]]ᵀ. With
// experts null it is the plain linear. With tiles.order set as well, the matrix-unit GEMM takes
// the rows tile by tile where it can (linear.cu falls back to the per-row GEMV elsewhere).
struct ExpertLinear {
  backend::Act x;
  std::int64_t x_div = 1;
  backend::Matrix w;
  const std::int32_t* experts = nullptr;
  ExpertTiles tiles;
  const float* bias = nullptr;
  backend::Act y;
  DType round = DType::kF32;
  bool accumulate = false;  // backend::LinearArgs' fusions
  const float* norm_weight = nullptr;
  float norm_eps = 1e-5f;
  backend::Act norm_src;
  bool gated_in = false;
  backend::Activation gated_act = backend::Activation::kSilu;
  backend::Act gated_src;
  // A second matrix of w's shape and format over the same rows into pair_y (MoE gate and up):
  // one decode GEMV launch for both where it can (null: none).
  const backend::Matrix* pair = nullptr;
  backend::Act pair_y;
};
void linear_experts(const ExpertLinear& a, const Stream& s);  // linear.cu
// Whether b can be ExpertLinear::pair of a: the same shape, format and expert strides (only the
// data pointers differ).
inline bool same_layout(const backend::Matrix& a, const backend::Matrix& b) {
  return a.mode == b.mode && a.bits == b.bits && a.group_size == b.group_size &&
         a.w_dtype == b.w_dtype && a.scales_dtype == b.scales_dtype &&
         a.scale_step == b.scale_step && a.n == b.n && a.k == b.k &&
         a.expert_stride_w == b.expert_stride_w && a.expert_stride_s == b.expert_stride_s;
}

}  // namespace mlxcel::gpu::kernels
