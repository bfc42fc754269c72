// Paged attention for prefill and decode: every token's query heads against its sequence's cached
// keys at positions <= its own (and within the sliding window), GQA, one online softmax
// (Milakov & Gimelshein) per (token, head) in fp32. One warp per (token, head): each lane scores
// one key of a 32-key (warp-wide) slice, the warp takes the slice's max and sum, then
// accumulates V with the lanes splitting v_dim. Same source for CUDA and HIP.
#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {
namespace {

constexpr int kWarps = 4;     // heads per block
constexpr int kMaxDim = 256;  // head_dim and v_dim limit
constexpr int kVPerLane = kMaxDim / MLXCEL_WARP_SIZE;

struct AttnParams {
  const void* q;
  std::int64_t q_stride;
  int n_heads, n_kv_heads, head_dim, v_dim, block_size;
  const char* base;
  std::size_t block_bytes, layer_offset, k_block_bytes;
  std::int64_t window;
  float scale;
  const std::int32_t* positions;
  const std::int32_t* seq_of_token;
  const std::int32_t* block_tables;
  std::int64_t max_blocks;
  void* out;
  std::int64_t out_stride;
  int round;
};

// grid (T, ceil(n_heads / kWarps)), kWarps warps.
template <typename T, typename KT>
__global__ void attention_kernel(AttnParams p) {
  __shared__ float qs[kWarps][kMaxDim];
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
  const std::int64_t t = blockIdx.x;
  const int h = blockIdx.y * kWarps + warp;
  const bool active = h < p.n_heads;
  if (active) {
    const T* q =
        static_cast<const T*>(p.q) + t * p.q_stride + static_cast<std::int64_t>(h) * p.head_dim;
    for (int d = lane; d < p.head_dim; d += MLXCEL_WARP_SIZE) qs[warp][d] = to_f32(q[d]) * p.scale;
  }
  __syncthreads();
  if (!active) return;
  const int g = h / (p.n_heads / p.n_kv_heads);
  const std::int64_t pos = p.positions[t];
  const std::int64_t first = p.window > 0 && pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
  const std::int32_t* table =
      p.block_tables + static_cast<std::int64_t>(p.seq_of_token[t]) * p.max_blocks;
  auto k_row = [&](std::int64_t j) {
    const std::int64_t blk = table[j / p.block_size], off = j % p.block_size;
    const char* b = p.base + static_cast<std::size_t>(blk) * p.block_bytes + p.layer_offset;
    return reinterpret_cast<const KT*>(b) +
           (static_cast<std::int64_t>(g) * p.block_size + off) * p.head_dim;
  };
  auto v_row = [&](std::int64_t j) {
    const std::int64_t blk = table[j / p.block_size], off = j % p.block_size;
    const char* b =
        p.base + static_cast<std::size_t>(blk) * p.block_bytes + p.layer_offset + p.k_block_bytes;
    return reinterpret_cast<const KT*>(b) +
           (static_cast<std::int64_t>(g) * p.block_size + off) * p.v_dim;
  };
  float m = -INFINITY, l = 0.0f;
  float acc[kVPerLane];
#pragma unroll
  for (int i = 0; i < kVPerLane; ++i) acc[i] = 0.0f;
  for (std::int64_t j0 = first; j0 <= pos; j0 += MLXCEL_WARP_SIZE) {
    const std::int64_t j = j0 + lane;
    float s = -INFINITY;
    if (j <= pos) {
      const KT* kr = k_row(j);
      float dot = 0.0f;
      for (int d = 0; d < p.head_dim; ++d) dot += qs[warp][d] * to_f32(kr[d]);
      s = dot;
    }
    const float mx = warp_max(s);
    const float nm = fmaxf(m, mx);  // finite: lane 0's key j0 <= pos is always valid
    const float c = expf(m - nm);
    const float pr = j <= pos ? expf(s - nm) : 0.0f;
    l = l * c + warp_sum(pr);
#pragma unroll
    for (int i = 0; i < kVPerLane; ++i) acc[i] *= c;
    const std::int64_t n = pos - j0 + 1 < MLXCEL_WARP_SIZE ? pos - j0 + 1 : MLXCEL_WARP_SIZE;
    for (int jj = 0; jj < n; ++jj) {
      const float pj = gpu_shfl(pr, jj);
      const KT* vr = v_row(j0 + jj);
#pragma unroll
      for (int i = 0; i < kVPerLane; ++i) {
        const int d = lane + i * MLXCEL_WARP_SIZE;
        if (d < p.v_dim) acc[i] += pj * to_f32(vr[d]);
      }
    }
    m = nm;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  T* o = static_cast<T*>(p.out) + t * p.out_stride + static_cast<std::int64_t>(h) * p.v_dim;
#pragma unroll
  for (int i = 0; i < kVPerLane; ++i) {
    const int d = lane + i * MLXCEL_WARP_SIZE;
    if (d < p.v_dim) store(o, d, acc[i] * inv, p.round);
  }
}

}  // namespace

namespace kernels {

void attention(const backend::AttentionArgs& a, const Stream& s) {
  const std::int64_t n_tok = a.step.n_tokens;
  if (n_tok == 0) return;
  const backend::KvLayout& kv = a.kv;
  if (kv.head_dim > kMaxDim || kv.v_dim > kMaxDim)
    throw_error(ErrorCategory::kUnsupported,
                "attention: head_dim " + std::to_string(kv.head_dim) + " / v_dim " +
                    std::to_string(kv.v_dim) +
                    " above the GPU kernel's 256; run with --device cpu");
  MLXCEL_CHECK(a.q.dtype == a.out.dtype && a.n_heads % kv.n_kv_heads == 0, ErrorCategory::kInternal,
               "gpu attention: dtype or head mismatch");
  AttnParams p;
  p.q = a.q.data;
  p.q_stride = a.q.stride;
  p.n_heads = a.n_heads;
  p.n_kv_heads = kv.n_kv_heads;
  p.head_dim = kv.head_dim;
  p.v_dim = kv.v_dim;
  p.block_size = kv.block_size;
  p.base = static_cast<const char*>(kv.base);
  p.block_bytes = kv.block_bytes();
  p.layer_offset = static_cast<std::size_t>(a.layer) * (kv.k_block_bytes() + kv.v_block_bytes());
  p.k_block_bytes = kv.k_block_bytes();
  p.window = a.window;
  p.scale = a.scale;
  p.positions = a.step.positions;
  p.seq_of_token = a.step.seq_of_token;
  p.block_tables = a.step.block_tables;
  p.max_blocks = a.step.max_blocks;
  p.out = a.out.data;
  p.out_stride = a.out.stride;
  p.round = round_code(a.round);
  auto st = static_cast<gpuStream_t>(s.handle());
  const dim3 grid(static_cast<unsigned>(n_tok), blocks_for(a.n_heads, kWarps));
  dispatch_act(a.q.dtype, "attention", [&](auto tag) {
    using A = decltype(tag);
    dispatch_act(kv.dtype, "attention (KV cache dtype)", [&](auto ktag) {
      using K = decltype(ktag);
      attention_kernel<A, K><<<grid, kWarps * MLXCEL_WARP_SIZE, 0, st>>>(p);
    });
  });
  check_launch("attention", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
