// qk-norm (optional), RoPE on q and k in place (mx.fast.rope semantics, backend/cpu/rope.h: base
// or freqs table, traditional or split halves, input scale, partial rotation) and the paged KV
// append of each token's K and V at its position, in one kernel: a decode step of a small model
// is mostly launches, and this op was four of them (two norms, the rotation, the append).
// Same source for CUDA and HIP.
#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {
namespace {

// 256 threads: the norm's partial sums then fall exactly as in rms_norm_act_kernel's 256-thread
// block (one element per thread up to head_dim 256), so fusing changed no bit of the output.
constexpr int kThreads = 256;

struct Params {
  void* q;
  void* k;
  const void* v;
  std::int64_t q_stride, k_stride, v_stride;
  int n_heads, n_kv_heads, head_dim, v_dim;
  // rope
  std::int64_t dims;
  int traditional;
  float base, scale, input_scale;
  const float* freqs;
  // qk-norm (null: none)
  const float* q_norm;
  const float* k_norm;
  float q_eps, k_eps;
  // KV cache
  char* kv_base;
  std::size_t block_stride, layer_offset, k_block_bytes;
  int block_size;
  const std::int32_t* positions;
  const std::int32_t* seq_of_token;
  const std::int32_t* block_tables;
  std::int64_t max_blocks;
  int round;
};

// Token t's slot in its sequence's block: the block's K rows of this layer, and the slot index.
__device__ __forceinline__ char* kv_block(const Params& p, std::int64_t t, std::int64_t* slot) {
  const std::int64_t pos = p.positions[t];
  const std::int64_t blk =
      p.block_tables[static_cast<std::int64_t>(p.seq_of_token[t]) * p.max_blocks +
                     pos / p.block_size];
  *slot = pos % p.block_size;
  return p.kv_base + static_cast<std::size_t>(blk) * p.block_stride + p.layer_offset;
}

// grid (T, n_heads + 2 * n_kv_heads): one block per head of one token. Blocks [0, n_heads) take
// q heads (norm, rotate); the next n_kv_heads take k heads (norm, rotate, append to the cache);
// the last n_kv_heads append v heads.
template <typename T, typename KT>
__global__ void __launch_bounds__(kThreads) rope_kv_append_kernel(Params p) {
  wait_previous_kernel();
  const std::int64_t t = blockIdx.x;
  const int hh = blockIdx.y;
  const int hd = p.head_dim;
  if (hh >= p.n_heads + p.n_kv_heads) {
    const int g = hh - p.n_heads - p.n_kv_heads;
    std::int64_t slot;
    char* kb = kv_block(p, t, &slot);
    KT* vc = reinterpret_cast<KT*>(kb + p.k_block_bytes) +
             (static_cast<std::int64_t>(g) * p.block_size + slot) * p.v_dim;
    const T* v = static_cast<const T*>(p.v) + t * p.v_stride + static_cast<std::int64_t>(g) * p.v_dim;
    for (int d = threadIdx.x; d < p.v_dim; d += kThreads) vc[d] = from_f32<KT>(to_f32(v[d]));
    return;
  }
  const bool is_q = hh < p.n_heads;
  const int head = is_q ? hh : hh - p.n_heads;
  T* row = (is_q ? static_cast<T*>(p.q) + t * p.q_stride : static_cast<T*>(p.k) + t * p.k_stride) +
           static_cast<std::int64_t>(head) * hd;
  // qk-norm with rms_norm's rounding: y = round(round(x * r) * w).
  const float* nw = is_q ? p.q_norm : p.k_norm;
  if (nw != nullptr) {
    float ss = 0.0f;
    for (int c = threadIdx.x; c < hd; c += kThreads) {
      const float e = to_f32(row[c]);
      ss += e * e;
    }
    ss = block_sum<kThreads>(ss);
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + (is_q ? p.q_eps : p.k_eps));
    for (int c = threadIdx.x; c < hd; c += kThreads)
      store(row, c, rnd(to_f32(row[c]) * inv, p.round) * nw[c], p.round);
    __syncthreads();  // the rotation pairs elements other threads normalized
  }
  const std::int64_t half = p.dims / 2;
  const float pos = static_cast<float>(p.positions[t]) * p.scale;
  const float step = logf(p.base) / static_cast<float>(half);
  const std::int64_t partner = p.traditional ? 1 : half;
  for (std::int64_t i = threadIdx.x; i < half; i += kThreads) {
    const float inv = p.freqs ? 1.0f / p.freqs[i] : expf(-static_cast<float>(i) * step);
    const float theta = pos * inv;
    const float c = cosf(theta), sn = sinf(theta);
    const std::int64_t j = p.traditional ? 2 * i : i;
    const float x1 = to_f32(row[j]) * p.input_scale, x2 = to_f32(row[j + partner]) * p.input_scale;
    store(row, j, x1 * c - x2 * sn, p.round);
    store(row, j + partner, x1 * sn + x2 * c, p.round);
  }
  if (is_q) return;
  __syncthreads();  // the cache gets the stored (rounded, rotated) row
  std::int64_t slot;
  KT* kc = reinterpret_cast<KT*>(kv_block(p, t, &slot)) +
           (static_cast<std::int64_t>(head) * p.block_size + slot) * hd;
  for (int d = threadIdx.x; d < hd; d += kThreads) kc[d] = from_f32<KT>(to_f32(row[d]));
}

}  // namespace

namespace kernels {

void rope_kv_append(const backend::RopeKvAppendArgs& a, const Stream& s) {
  const std::int64_t n_tok = a.step.n_tokens;
  if (n_tok == 0) return;
  MLXCEL_CHECK(a.q.dtype == a.k.dtype && a.k.dtype == a.v.dtype, ErrorCategory::kInternal,
               "gpu rope_kv_append: q/k/v dtypes differ");
  MLXCEL_CHECK(a.kv.n_kv_heads == a.n_kv_heads && a.kv.head_dim == a.head_dim,
               ErrorCategory::kInternal, "gpu rope_kv_append: KV layout differs from k");
  MLXCEL_CHECK(a.rope.dims > 0 && a.rope.dims % 2 == 0 && a.rope.dims <= a.head_dim,
               ErrorCategory::kBadInput, "rope: dims must be even and <= head_dim");
  Params p;
  p.q = a.q.data;
  p.k = a.k.data;
  p.v = a.v.data;
  p.q_stride = a.q.stride;
  p.k_stride = a.k.stride;
  p.v_stride = a.v.stride;
  p.n_heads = a.n_heads;
  p.n_kv_heads = a.n_kv_heads;
  p.head_dim = a.head_dim;
  p.v_dim = a.kv.v_dim;
  p.dims = a.rope.dims;
  p.traditional = a.rope.traditional ? 1 : 0;
  p.base = a.rope.base;
  p.scale = a.rope.scale;
  p.input_scale = a.rope.input_scale;
  p.freqs = a.rope.freqs;
  p.q_norm = a.q_norm;
  p.k_norm = a.k_norm;
  p.q_eps = a.q_norm_eps;
  p.k_eps = a.k_norm_eps;
  p.kv_base = static_cast<char*>(a.kv.base);
  p.block_stride = a.kv.block_stride();
  p.layer_offset = static_cast<std::size_t>(a.layer) * a.kv.layer_stride();
  p.k_block_bytes = a.kv.k_block_bytes();
  p.block_size = a.kv.block_size;
  p.positions = a.step.positions;
  p.seq_of_token = a.step.seq_of_token;
  p.block_tables = a.step.block_tables;
  p.max_blocks = a.step.max_blocks;
  p.round = round_code(a.round);
  const dim3 grid(static_cast<unsigned>(n_tok), a.n_heads + 2 * a.n_kv_heads);
  dispatch_act(a.q.dtype, "rope_kv_append", [&](auto tag) {
    using A = decltype(tag);
    dispatch_act(a.kv.dtype, "rope_kv_append (KV cache dtype)", [&](auto ktag) {
      using K = decltype(ktag);
      launch_kernel(rope_kv_append_kernel<A, K>, grid, kThreads, 0, s, p);
    });
  });
  check_launch("rope_kv_append", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
