// Paged attention for prefill and decode: every token's query heads against its sequence's cached
// keys at positions <= its own (and within the sliding window), GQA, fp32 online softmax
// (Milakov & Gimelshein) per (token, head).
//
// Keys are cut into fixed spans of kSpan positions. One block of kWarps (8) warps computes a
// span's partial (max, sum, unnormalized V) for one (token, head): warp w scores keys w*8 .. w*8+7
// of the span with the lanes splitting head_dim in consecutive slices (one vector load per key and
// lane, one warp_sum per key), then the warps' partials merge in warp order (8 warps of 8 keys:
// 29 -> 26 us per 8B decode layer on the H200 against 4 of 16, run 21: twice the warps to hide
// each key's dependent chain). Two launch
// shapes use that same span code and the same span-after-span merge (explicit fmaf / __fmul_rn,
// so no contraction differs between them):
//  - split (flash-decoding; small steps such as decode): one block per (span, head, token), grid
//    independent of the real lengths; every block stores its partial in the workspace and the
//    last block of a (token, head) to finish (an atomic counter) merges the spans in position
//    order and writes the output. One launch, all SMs busy at batch 1.
//  - one block per (token, head) walking its spans itself (large steps such as prefill, which
//    already fill the GPU).
// A token's output is therefore bit-identical whichever shape ran: decode is batch invariant and
// equals prefill. Same source for CUDA and HIP.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * MLXCEL_WARP_SIZE;
constexpr int kSpan = 64;                                   // key positions per span
constexpr int kKeysPerWarp = kSpan / kWarps;                // 8
constexpr int kChunk = 4;                                   // keys whose loads overlap
constexpr int kMaxDim = 256;                                // head_dim and v_dim limit
constexpr int kDPer = (kMaxDim + kThreads - 1) / kThreads;  // v_dim elements per thread (merge)
// Split launches: below this many (token, head) pairs the one-block shape leaves SMs idle.
constexpr std::int64_t kSplitBelowPairs = 2048;
constexpr std::size_t kMaxWorkspace = std::size_t{256} << 20;
constexpr std::size_t kCounterBytes = kSplitBelowPairs * sizeof(int);

struct AttnParams {
  const void* q;
  std::int64_t q_stride;
  int n_heads, n_kv_heads, head_dim, v_dim, block_size;
  const char* base;
  std::size_t block_stride, layer_offset, k_block_bytes;
  std::int64_t window;
  float scale;
  const std::int32_t* positions;
  const std::int32_t* seq_of_token;
  const std::int32_t* block_tables;
  std::int64_t max_blocks;
  void* out;
  std::int64_t out_stride;
  int round;
  // Split shape: spans per (token, head) in the workspace, the counters and the partials.
  std::int64_t n_spans;
  int* counters;
  float* partials;
};

struct Smem {
  float q[kMaxDim];
  float wacc[kWarps][kMaxDim];
  float wm[kWarps], wl[kWarps];
  float pacc[kMaxDim];  // the span's partial after the warp merge
  float pm, pl;
  // Byte offsets of the span's K and V rows from the pool base (block-table lookups done once,
  // in parallel); keys outside [first, pos] point at key pos and are masked.
  std::int64_t kofs[kSpan], vofs[kSpan];
  int last;
};

struct TokenHead {
  std::int64_t pos, first;
  int g;
  const std::int32_t* table;
};

__device__ __forceinline__ TokenHead token_head(const AttnParams& p, std::int64_t t, int h) {
  TokenHead th;
  th.pos = p.positions[t];
  th.first = p.window > 0 && th.pos - p.window + 1 > 0 ? th.pos - p.window + 1 : 0;
  th.g = h / (p.n_heads / p.n_kv_heads);
  th.table = p.block_tables + static_cast<std::int64_t>(p.seq_of_token[t]) * p.max_blocks;
  return th;
}

template <typename T>
__device__ __forceinline__ void load_q(const AttnParams& p, Smem& sm, std::int64_t t, int h) {
  const T* q =
      static_cast<const T*>(p.q) + t * p.q_stride + static_cast<std::int64_t>(h) * p.head_dim;
  for (int d = threadIdx.x; d < p.head_dim; d += kThreads) sm.q[d] = to_f32(q[d]) * p.scale;
}

// Lane `lane`'s P consecutive elements [lane * P, lane * P + P) of a K or V row of n elements, as
// floats: one vector load when the slice lies inside the row and rows are P-aligned (`vec`);
// otherwise element by element, clamped to the row (the caller zeroes what lies beyond n).
template <typename KT, int P>
__device__ __forceinline__ void load_slice(const KT* row, int lane, int n, bool vec,
                                           float (&x)[P]) {
  const int d0 = lane * P;
  if (vec && d0 + P <= n) {
    struct alignas(P * sizeof(KT) >= 16 ? 16 : P * sizeof(KT)) Slice {
      KT v[P];
    };
    const Slice sl = *reinterpret_cast<const Slice*>(row + d0);
#pragma unroll
    for (int i = 0; i < P; ++i) x[i] = to_f32(sl.v[i]);
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) x[i] = to_f32(row[d0 + i < n ? d0 + i : n - 1]);
  }
}

// load_slice's elements left in the cache dtype (converted where used), so that a warp's 8 K and
// 8 V slices can all be in flight at once in few registers (PF below).
template <typename KT, int P>
struct RawSlice {
  KT v[P];
};
template <typename KT, int P>
__device__ __forceinline__ RawSlice<KT, P> load_raw(const KT* row, int lane, int n, bool vec) {
  const int d0 = lane * P;
  RawSlice<KT, P> r;
  if (vec && d0 + P <= n) {
    struct alignas(P * sizeof(KT) >= 16 ? 16 : P * sizeof(KT)) Slice {
      KT v[P];
    };
    const Slice sl = *reinterpret_cast<const Slice*>(row + d0);
#pragma unroll
    for (int i = 0; i < P; ++i) r.v[i] = sl.v[i];
  } else {
#pragma unroll
    for (int i = 0; i < P; ++i) r.v[i] = row[d0 + i < n ? d0 + i : n - 1];
  }
  return r;
}

// The span's partial into sm.pm / sm.pl / sm.pacc (all threads call it; ends synchronized).
// Lane l holds elements [l * P, l * P + P) of q, of each K row and of the V accumulator, with P
// the smallest of 2, 4, 8 covering the row in one warp (4 for head_dim 128: one 8-byte load per
// key and lane where a lane-strided layout took four 2-byte loads, plus four for the rows' unused
// half when P was fixed at 8). Every load is unconditional (masked keys read key pos), so a
// chunk's kChunk K rows (then V rows) are in flight at once instead of one dependent load chain
// per key.
// PF (decode's split launch, 2-byte caches with P <= 4; MLXCEL_GPU_ATTN_PREFETCH=0 turns it
// off): the warp's 8 K slices and 8 V slices are loaded together before any score, one memory
// round trip instead of four (two K chunks, two V chunks); the arithmetic and its order are
// unchanged, so are the bits. Run 27 (H100): 11.8 -> 8.5 us per 8B layer at ~600 positions.
template <typename KT, int P, bool PF = false>
__device__ void span_partial(const AttnParams& p, Smem& sm, const TokenHead& th,
                             std::int64_t span) {
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
  if (threadIdx.x < kSpan) {
    std::int64_t j = span * kSpan + threadIdx.x;
    j = j < th.first ? th.pos : j > th.pos ? th.pos : j;
    const std::int64_t blk = th.table[j / p.block_size], off = j % p.block_size;
    const std::int64_t row = static_cast<std::int64_t>(th.g) * p.block_size + off;
    const std::int64_t b =
        blk * static_cast<std::int64_t>(p.block_stride) + static_cast<std::int64_t>(p.layer_offset);
    sm.kofs[threadIdx.x] = b + row * p.head_dim * static_cast<std::int64_t>(sizeof(KT));
    sm.vofs[threadIdx.x] = b + static_cast<std::int64_t>(p.k_block_bytes) +
                           row * p.v_dim * static_cast<std::int64_t>(sizeof(KT));
  }
  __syncthreads();
  const int k0 = warp * kKeysPerWarp;
  const std::int64_t j0 = span * kSpan + k0;
  float qr[P];
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int d = lane * P + i;
    qr[i] = d < p.head_dim ? sm.q[d] : 0.0f;
  }
  // Vector loads need every row start P-aligned: head_dim (v_dim) a multiple of P.
  const bool kvec = p.head_dim % P == 0, vvec = p.v_dim % P == 0;
  // The key loops stay rolled over chunks of kChunk keys, whose loads are in flight together
  // (chunks of 4, 8 and 16 keys measured the same on the H200, run 19).
  // Lane e keeps key e's score (masked: -inf); the V loop fetches it with a shuffle.
  float mw = -INFINITY, my_s = -INFINITY;
  float lw = 0.0f;
  float acc[P];
#pragma unroll
  for (int i = 0; i < P; ++i) acc[i] = 0.0f;
  if constexpr (PF) {
    RawSlice<KT, P> kr[kKeysPerWarp], vr[kKeysPerWarp];
#pragma unroll
    for (int e = 0; e < kKeysPerWarp; ++e) {
      kr[e] = load_raw<KT, P>(reinterpret_cast<const KT*>(p.base + sm.kofs[k0 + e]), lane,
                              p.head_dim, kvec);
      vr[e] = load_raw<KT, P>(reinterpret_cast<const KT*>(p.base + sm.vofs[k0 + e]), lane,
                              p.v_dim, vvec);
    }
#pragma unroll
    for (int e = 0; e < kKeysPerWarp; ++e) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < P; ++i) dot = fmaf(qr[i], to_f32(kr[e].v[i]), dot);
      const std::int64_t j = j0 + e;
      float v = warp_sum(dot);
      if (j < th.first || j > th.pos) v = -INFINITY;
      mw = fmaxf(mw, v);
      if (lane == e) my_s = v;
    }
    if (mw != -INFINITY) {  // warp-uniform
#pragma unroll
      for (int e = 0; e < kKeysPerWarp; ++e) {
        const float sc = gpu_shfl(my_s, e);
        const float pj = sc == -INFINITY ? 0.0f : expf(sc - mw);
        lw += pj;
#pragma unroll
        for (int i = 0; i < P; ++i) acc[i] = fmaf(pj, to_f32(vr[e].v[i]), acc[i]);
      }
    }
  } else {
#pragma unroll 1
    for (int e0 = 0; e0 < kKeysPerWarp; e0 += kChunk) {
      float s[kChunk];
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const KT* kr = reinterpret_cast<const KT*>(p.base + sm.kofs[k0 + e0 + c]);
        // Unconditional (clamped) loads: beyond head_dim qr is 0. Predicated loads made the
        // compiler reuse one register, so every load waited for the one before (run 15's SASS).
        float kx[P];
        load_slice<KT, P>(kr, lane, p.head_dim, kvec, kx);
        float dot = 0.0f;
#pragma unroll
        for (int i = 0; i < P; ++i) dot = fmaf(qr[i], kx[i], dot);
        s[c] = dot;
      }
#pragma unroll
      for (int c = 0; c < kChunk; ++c) {
        const std::int64_t j = j0 + e0 + c;
        float v = warp_sum(s[c]);
        if (j < th.first || j > th.pos) v = -INFINITY;
        mw = fmaxf(mw, v);
        if (lane == e0 + c) my_s = v;
      }
    }
    if (mw != -INFINITY) {  // warp-uniform
#pragma unroll 1
      for (int e0 = 0; e0 < kKeysPerWarp; e0 += kChunk) {
#pragma unroll
        for (int c = 0; c < kChunk; ++c) {
          const float sc = gpu_shfl(my_s, e0 + c);
          const float pj = sc == -INFINITY ? 0.0f : expf(sc - mw);
          lw += pj;
          const KT* vr = reinterpret_cast<const KT*>(p.base + sm.vofs[k0 + e0 + c]);
          float vx[P];  // clamped like K; acc beyond v_dim is never stored
          load_slice<KT, P>(vr, lane, p.v_dim, vvec, vx);
#pragma unroll
          for (int i = 0; i < P; ++i) acc[i] = fmaf(pj, vx[i], acc[i]);
        }
      }
    }
  }
  if (lane == 0) {
    sm.wm[warp] = mw;
    sm.wl[warp] = lw;
  }
#pragma unroll
  for (int i = 0; i < P; ++i) {
    const int d = lane * P + i;
    if (d < p.v_dim) sm.wacc[warp][d] = acc[i];
  }
  __syncthreads();
  float m = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m = fmaxf(m, sm.wm[w]);
  float c[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) c[w] = sm.wm[w] == -INFINITY ? 0.0f : expf(sm.wm[w] - m);
  for (int d = threadIdx.x; d < p.v_dim; d += kThreads) {
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) a = fmaf(sm.wacc[w][d], c[w], a);
    sm.pacc[d] = a;
  }
  if (threadIdx.x == 0) {
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) l = fmaf(sm.wl[w], c[w], l);
    sm.pm = m;
    sm.pl = l;
  }
  __syncthreads();
}

// Running state of one (token, head): thread tid holds v_dim elements tid, tid + kThreads, ...
struct Running {
  float m = -INFINITY, l = 0.0f;
  float acc[kDPer];
};

// state = merge(state, span partial); the one sequence both launch shapes run, span by span.
__device__ __forceinline__ void merge(Running& r, float m2, float l2, const float (&a2)[kDPer],
                                      int v_dim) {
  if (m2 == -INFINITY) return;
  const float nm = fmaxf(r.m, m2);
  const float c1 = r.m == -INFINITY ? 0.0f : expf(r.m - nm);
  const float c2 = expf(m2 - nm);
  r.l = fmaf(l2, c2, __fmul_rn(r.l, c1));
#pragma unroll
  for (int i = 0; i < kDPer; ++i) {
    const int d = threadIdx.x + i * kThreads;
    if (d < v_dim) r.acc[i] = fmaf(a2[i], c2, __fmul_rn(r.acc[i], c1));
  }
  r.m = nm;
}

template <typename T>
__device__ __forceinline__ void write_out(const AttnParams& p, const Running& r, std::int64_t t,
                                          int h) {
  const float inv = r.l > 0.0f ? 1.0f / r.l : 0.0f;
  T* o = static_cast<T*>(p.out) + t * p.out_stride + static_cast<std::int64_t>(h) * p.v_dim;
#pragma unroll
  for (int i = 0; i < kDPer; ++i) {
    const int d = threadIdx.x + i * kThreads;
    if (d < p.v_dim) store(o, d, __fmul_rn(r.acc[i], inv), p.round);
  }
}

__device__ __forceinline__ void init(Running& r) {
#pragma unroll
  for (int i = 0; i < kDPer; ++i) r.acc[i] = 0.0f;
}

// grid (T, n_heads): one block per (token, head) walking its spans.
template <typename T, typename KT, int P>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttnParams p) {
  wait_previous_kernel();
  __shared__ Smem sm;
  const std::int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const TokenHead th = token_head(p, t, h);
  load_q<T>(p, sm, t, h);
  __syncthreads();
  Running r;
  init(r);
  for (std::int64_t z = th.first / kSpan; z <= th.pos / kSpan; ++z) {
    span_partial<KT, P>(p, sm, th, z);
    float a2[kDPer];
#pragma unroll
    for (int i = 0; i < kDPer; ++i) {
      const int d = threadIdx.x + i * kThreads;
      a2[i] = d < p.v_dim ? sm.pacc[d] : 0.0f;
    }
    merge(r, sm.pm, sm.pl, a2, p.v_dim);
    __syncthreads();  // sm.pacc and the row offsets are rewritten by the next span
  }
  write_out<T>(p, r, t, h);
}

// grid (n_spans, n_heads, T): one block per (span, head, token); the last to finish merges.
template <typename T, typename KT, int P, bool PF>
__global__ void __launch_bounds__(kThreads) attention_split_kernel(AttnParams p) {
  wait_previous_kernel();
  __shared__ Smem sm;
  const std::int64_t span = blockIdx.x, t = blockIdx.z;
  const int h = blockIdx.y;
  const TokenHead th = token_head(p, t, h);
  const std::int64_t z0 = th.first / kSpan, z1 = th.pos / kSpan;
  if (span < z0 || span > z1) return;  // block-uniform, before any barrier
  load_q<T>(p, sm, t, h);
  __syncthreads();
  span_partial<KT, P, PF>(p, sm, th, span);
  const std::int64_t pair = t * p.n_heads + h;
  const std::int64_t stride = p.v_dim + 2;
  float* part = p.partials + (pair * p.n_spans + span) * stride;
  for (int d = threadIdx.x; d < p.v_dim; d += kThreads) part[2 + d] = sm.pacc[d];
  if (threadIdx.x == 0) {
    part[0] = sm.pm;
    part[1] = sm.pl;
  }
  __threadfence();  // the partial is visible device-wide before the counter says so
  __syncthreads();
  if (threadIdx.x == 0) {
    const int done = atomicAdd(p.counters + pair, 1);
    sm.last = done == static_cast<int>(z1 - z0);
  }
  __syncthreads();
  if (!sm.last) return;
  __threadfence();
  if (threadIdx.x == 0) p.counters[pair] = 0;  // ready for the next launch on this stream
  Running r;
  init(r);
  // Spans in position order, fetched kFetch at a time so their loads overlap.
  constexpr int kFetch = 4;
  for (std::int64_t z = z0; z <= z1; z += kFetch) {
    float m8[kFetch], l8[kFetch], a8[kFetch][kDPer];
#pragma unroll
    for (int c = 0; c < kFetch; ++c) {
      const std::int64_t zz = z + c <= z1 ? z + c : z1;
      const volatile float* pz = p.partials + (pair * p.n_spans + zz) * stride;
      m8[c] = pz[0];
      l8[c] = pz[1];
#pragma unroll
      for (int i = 0; i < kDPer; ++i) {
        const int d = threadIdx.x + i * kThreads;
        a8[c][i] = d < p.v_dim ? pz[2 + d] : 0.0f;
      }
    }
#pragma unroll
    for (int c = 0; c < kFetch; ++c)
      if (z + c <= z1) merge(r, m8[c], l8[c], a8[c], p.v_dim);
  }
  write_out<T>(p, r, t, h);
}

// Elements per lane P: the smallest of 2, 4, 8 with 32 P >= the row (both launch shapes of one
// model use the same P, so a token's output stays the same whichever shape ran).
template <typename F>
void with_slice(int dim, F&& f) {
  if (dim <= 2 * MLXCEL_WARP_SIZE) return f(std::integral_constant<int, 2>{});
  if (dim <= 4 * MLXCEL_WARP_SIZE) return f(std::integral_constant<int, 4>{});
  f(std::integral_constant<int, 8>{});
}

struct Plan {
  bool split = false;
  std::int64_t n_spans = 0;
  std::size_t counter_bytes = 0, bytes = 0;
};

bool split_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLXCEL_GPU_SPLIT_KV");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

Plan plan(const backend::AttentionArgs& a) {
  Plan pl;
  const std::int64_t pairs = a.step.n_tokens * a.n_heads;
  pl.n_spans = (a.step.max_blocks * a.kv.block_size + kSpan - 1) / kSpan;
  if (!split_enabled() || pairs >= kSplitBelowPairs || pl.n_spans <= 1) return pl;
  // A fixed counter region (zeroed once with the workspace; every launch leaves it zero), so a
  // later step with another token count never reads old partials as counters.
  pl.counter_bytes = kCounterBytes;
  pl.bytes = pl.counter_bytes + static_cast<std::size_t>(pairs) *
                                    static_cast<std::size_t>(pl.n_spans) *
                                    static_cast<std::size_t>(a.kv.v_dim + 2) * sizeof(float);
  pl.split = pl.bytes <= kMaxWorkspace;
  if (!pl.split) pl.bytes = 0;
  return pl;
}

}  // namespace

namespace kernels {

AttentionWorkspace attention_workspace(const backend::AttentionArgs& a) {
  const Plan pl = plan(a);
  return {pl.bytes, pl.counter_bytes};
}

void attention(const backend::AttentionArgs& a, void* workspace, const Stream& s) {
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
  const Plan pl = plan(a);
  MLXCEL_CHECK(!pl.split || workspace, ErrorCategory::kInternal, "gpu attention: no workspace");
  AttnParams p;
  p.q = a.q.data;
  p.q_stride = a.q.stride;
  p.n_heads = a.n_heads;
  p.n_kv_heads = kv.n_kv_heads;
  p.head_dim = kv.head_dim;
  p.v_dim = kv.v_dim;
  p.block_size = kv.block_size;
  p.base = static_cast<const char*>(kv.base);
  p.block_stride = kv.block_stride();
  p.layer_offset = static_cast<std::size_t>(a.layer) * kv.layer_stride();
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
  p.n_spans = pl.n_spans;
  p.counters = pl.split ? static_cast<int*>(workspace) : nullptr;
  p.partials = pl.split ? reinterpret_cast<float*>(static_cast<char*>(workspace) + pl.counter_bytes)
                        : nullptr;
  dispatch_act(a.q.dtype, "attention", [&](auto tag) {
    using A = decltype(tag);
    dispatch_act(kv.dtype, "attention (KV cache dtype)", [&](auto ktag) {
      using K = decltype(ktag);
      with_slice(std::max(kv.head_dim, kv.v_dim), [&](auto ptag) {
        constexpr int P = decltype(ptag)::value;
        if (pl.split) {
          const dim3 grid(static_cast<unsigned>(pl.n_spans), static_cast<unsigned>(a.n_heads),
                          static_cast<unsigned>(n_tok));
          // All of a warp's K and V slices in flight at once (2-byte caches up to head_dim 128;
          // on since run 27, MLXCEL_GPU_ATTN_PREFETCH=0 turns it off).
          static const bool prefetch = env_int("MLXCEL_GPU_ATTN_PREFETCH", 1) != 0;
          if constexpr (sizeof(K) * P <= 8) {
            if (prefetch) {
              launch_kernel(attention_split_kernel<A, K, P, true>, grid, kThreads, 0, s, p);
              return;
            }
          }
          launch_kernel(attention_split_kernel<A, K, P, false>, grid, kThreads, 0, s, p);
        } else {
          const dim3 grid(static_cast<unsigned>(n_tok), static_cast<unsigned>(a.n_heads));
          launch_kernel(attention_kernel<A, K, P>, grid, kThreads, 0, s, p);
        }
      });
    });
  });
  check_launch("attention", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
