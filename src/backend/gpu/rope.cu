// RoPE on q and k in place (mx.fast.rope semantics, backend/cpu/rope.h: base or freqs table,
// traditional or split halves, input scale, partial rotation) fused with the paged KV append of
// each token's K and V at its position. Same source for CUDA and HIP.
#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"

namespace mlxcel::gpu {
namespace {

constexpr int kThreads = 128;

struct RopeParams {
  void* q;
  void* k;
  std::int64_t q_stride, k_stride;
  int n_heads, n_kv_heads, head_dim;
  std::int64_t dims;
  int traditional;
  float base, scale, input_scale;
  const float* freqs;
  const std::int32_t* positions;
  int round;
};

// grid (T, n_heads + n_kv_heads): one block rotates one head of one token.
template <typename T>
__global__ void rope_kernel(RopeParams p) {
  const std::int64_t t = blockIdx.x;
  const int hh = blockIdx.y;
  const bool is_q = hh < p.n_heads;
  T* row = is_q ? static_cast<T*>(p.q) + t * p.q_stride + static_cast<std::int64_t>(hh) * p.head_dim
                : static_cast<T*>(p.k) + t * p.k_stride +
                      static_cast<std::int64_t>(hh - p.n_heads) * p.head_dim;
  const std::int64_t half = p.dims / 2;
  const float pos = static_cast<float>(p.positions[t]) * p.scale;
  const float step = logf(p.base) / static_cast<float>(half);
  const std::int64_t partner = p.traditional ? 1 : half;
  for (std::int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float inv = p.freqs ? 1.0f / p.freqs[i] : expf(-static_cast<float>(i) * step);
    const float theta = pos * inv;
    const float c = cosf(theta), sn = sinf(theta);
    const std::int64_t j = p.traditional ? 2 * i : i;
    const float x1 = to_f32(row[j]) * p.input_scale, x2 = to_f32(row[j + partner]) * p.input_scale;
    store(row, j, x1 * c - x2 * sn, p.round);
    store(row, j + partner, x1 * sn + x2 * c, p.round);
  }
}

struct AppendParams {
  const void* k;
  const void* v;
  std::int64_t k_stride, v_stride;
  char* base;
  std::size_t block_stride, layer_offset, k_block_bytes;
  int n_kv_heads, head_dim, v_dim, block_size;
  const std::int32_t* positions;
  const std::int32_t* seq_of_token;
  const std::int32_t* block_tables;
  std::int64_t max_blocks;
};

// grid T: token t's K and V rows into their slot of its sequence's block.
template <typename T, typename KT>
__global__ void kv_append_kernel(AppendParams p) {
  const std::int64_t t = blockIdx.x;
  const std::int64_t pos = p.positions[t];
  const std::int64_t blk =
      p.block_tables[static_cast<std::int64_t>(p.seq_of_token[t]) * p.max_blocks +
                     pos / p.block_size];
  const std::int64_t off = pos % p.block_size;
  char* kb = p.base + static_cast<std::size_t>(blk) * p.block_stride + p.layer_offset;
  KT* kc = reinterpret_cast<KT*>(kb);
  KT* vc = reinterpret_cast<KT*>(kb + p.k_block_bytes);
  const T* k = static_cast<const T*>(p.k) + t * p.k_stride;
  const T* v = static_cast<const T*>(p.v) + t * p.v_stride;
  const int nk = p.n_kv_heads * p.head_dim, nv = p.n_kv_heads * p.v_dim;
  for (int i = threadIdx.x; i < nk; i += blockDim.x) {
    const int g = i / p.head_dim, d = i % p.head_dim;
    kc[(static_cast<std::int64_t>(g) * p.block_size + off) * p.head_dim + d] =
        from_f32<KT>(to_f32(k[i]));
  }
  for (int i = threadIdx.x; i < nv; i += blockDim.x) {
    const int g = i / p.v_dim, d = i % p.v_dim;
    vc[(static_cast<std::int64_t>(g) * p.block_size + off) * p.v_dim + d] =
        from_f32<KT>(to_f32(v[i]));
  }
}

}  // namespace

namespace kernels {

void rope_kv_append(const backend::RopeKvAppendArgs& a, const Stream& s) {
  const std::int64_t n_tok = a.step.n_tokens;
  if (n_tok == 0) return;
  MLXCEL_CHECK(a.q.dtype == a.k.dtype && a.k.dtype == a.v.dtype, ErrorCategory::kInternal,
               "gpu rope_kv_append: q/k/v dtypes differ");
  MLXCEL_CHECK(a.rope.dims > 0 && a.rope.dims % 2 == 0 && a.rope.dims <= a.head_dim,
               ErrorCategory::kBadInput, "rope: dims must be even and <= head_dim");
  RopeParams r;
  r.q = a.q.data;
  r.k = a.k.data;
  r.q_stride = a.q.stride;
  r.k_stride = a.k.stride;
  r.n_heads = a.n_heads;
  r.n_kv_heads = a.n_kv_heads;
  r.head_dim = a.head_dim;
  r.dims = a.rope.dims;
  r.traditional = a.rope.traditional ? 1 : 0;
  r.base = a.rope.base;
  r.scale = a.rope.scale;
  r.input_scale = a.rope.input_scale;
  r.freqs = a.rope.freqs;
  r.positions = a.step.positions;
  r.round = round_code(a.round);
  AppendParams p;
  p.k = a.k.data;
  p.v = a.v.data;
  p.k_stride = a.k.stride;
  p.v_stride = a.v.stride;
  p.base = static_cast<char*>(a.kv.base);
  p.block_stride = a.kv.block_stride();
  p.layer_offset = static_cast<std::size_t>(a.layer) * a.kv.layer_stride();
  p.k_block_bytes = a.kv.k_block_bytes();
  p.n_kv_heads = a.kv.n_kv_heads;
  p.head_dim = a.kv.head_dim;
  p.v_dim = a.kv.v_dim;
  p.block_size = a.kv.block_size;
  p.positions = a.step.positions;
  p.seq_of_token = a.step.seq_of_token;
  p.block_tables = a.step.block_tables;
  p.max_blocks = a.step.max_blocks;
  auto st = static_cast<gpuStream_t>(s.handle());
  dispatch_act(a.q.dtype, "rope_kv_append", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<dim3(static_cast<unsigned>(a.step.n_tokens), a.n_heads + a.n_kv_heads),
                     kThreads, 0, st>>>(r);
  });
  check_launch("rope_kv_append (rope)", s.device());
  dispatch_act(a.q.dtype, "rope_kv_append", [&](auto tag) {
    using A = decltype(tag);
    dispatch_act(a.kv.dtype, "rope_kv_append (KV cache dtype)", [&](auto ktag) {
      using K = decltype(ktag);
      kv_append_kernel<A, K><<<static_cast<unsigned>(n_tok), 256, 0, st>>>(p);
    });
  });
  check_launch("rope_kv_append (KV append)", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
