// The sampling op on the GPU: one block per sampled row. Every decision uses the shared arithmetic
// of backend/sample_math.h (integer weights, exp_neg, Philox), so this kernel picks the token the
// CPU's cpu::sample_row picks for the same logits; the orders in which it reduces are its own
// because only exact (integer, max, count) reductions decide anything. Compiled with contraction
// off (src/CMakeLists.txt). Same source for CUDA and HIP.
#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/sample_math.h"

namespace mlxcel::gpu {
namespace {

using backend::SampleOut;
using backend::SampleProc;
using backend::SampleRow;
using backend::SampleStatus;

// One block per row: 1,024 threads, since a 150k-256k vocabulary is several passes per row and a
// 256-thread block left decode waiting ~0.4 ms per step on one SM.
constexpr int kThreads = 1024;

// Tree reduction over the block; every thread gets the result. T is trivially copyable.
template <typename T, typename Op>
__device__ T block_reduce(T v, Op op) {
  __shared__ T buf[kThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (static_cast<int>(threadIdx.x) < s) buf[threadIdx.x] = op(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  const T r = buf[0];
  __syncthreads();
  return r;
}

struct Sum64 {
  __device__ std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};
struct SumF64 {
  __device__ double operator()(double a, double b) const { return a + b; }
};
// (key, id) with the larger value first, then the lower id.
struct Best {
  std::uint32_t key;
  std::int32_t id;
};
struct BestOp {
  __device__ Best operator()(Best a, Best b) const {
    if (a.id < 0) return b;
    if (b.id < 0) return a;
    return (a.key > b.key || (a.key == b.key && a.id < b.id)) ? a : b;
  }
};
__device__ __forceinline__ bool before(Best a, Best b) {  // a ranks strictly before b
  return a.key > b.key || (a.key == b.key && a.id < b.id);
}

// Number of tokens with key(s) >= k.
__device__ std::uint64_t count_at_least(const float* s, std::int64_t n, std::uint32_t k) {
  std::uint64_t c = 0;
  for (std::int64_t t = threadIdx.x; t < n; t += kThreads) c += backend::float_order_key(s[t]) >= k;
  return block_reduce(c, Sum64{});
}

// The `m` first tokens by (value descending, id ascending): token t is kept when
// key > *kth || (key == *kth && t <= *tie_limit).
__device__ void top_m(const float* s, std::int64_t n, std::int64_t m, std::uint32_t* kth,
                      std::int64_t* tie_limit) {
  // Largest key K with count(key >= K) >= m.
  std::uint64_t lo = 0, hi = 0x100000000ull;
  while (hi - lo > 1) {
    const std::uint64_t mid = (lo + hi) / 2;
    if (count_at_least(s, n, static_cast<std::uint32_t>(mid)) >= static_cast<std::uint64_t>(m)) lo = mid;
    else hi = mid;
  }
  const auto K = static_cast<std::uint32_t>(lo);
  const std::uint64_t above = K == 0xffffffffu ? 0 : count_at_least(s, n, K + 1);
  const std::uint64_t ties = static_cast<std::uint64_t>(m) - above;
  // Smallest id L with #(ties with id <= L) >= ties.
  std::int64_t l = -1, h = n - 1;
  while (h - l > 1) {
    const std::int64_t mid = (l + h) / 2;
    std::uint64_t c = 0;
    for (std::int64_t t = threadIdx.x; t <= mid; t += kThreads) c += backend::float_order_key(s[t]) == K;
    if (block_reduce(c, Sum64{}) >= ties) h = mid;
    else l = mid;
  }
  *kth = K;
  *tie_limit = h;
}

__device__ __forceinline__ bool kept(float v, std::int64_t t, std::uint32_t kth, std::int64_t tie_limit) {
  const std::uint32_t k = backend::float_order_key(v);
  return k > kth || (k == kth && t <= tie_limit);
}

struct SampleParams {
  const void* logits;
  int logits_code;
  std::int64_t logits_stride;
  std::int64_t vocab;
  const SampleRow* rows;
  const SampleProc* procs;
  const std::uint32_t* masks;
  std::int64_t mask_words;
  float* scratch;
  SampleOut* out;
  int greedy_fast;  // MLXCEL_GPU_SAMPLE_FAST=1: plain greedy rows take greedy_fast
  int parts;        // > 1: greedy rows were scanned by sample_parts_kernel in this many parts
};

// The best (key, id) over the block through warp shuffles and one shared-memory pass (BestOp is
// associative and commutative, so the order does not matter); every thread gets it.
__device__ Best block_best(Best b) {
  constexpr int kWarps = kThreads / MLXCEL_WARP_SIZE;
  __shared__ Best per_warp[kWarps];
#pragma unroll
  for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1)
    b = BestOp{}(b, Best{gpu_shfl_xor(b.key, off), gpu_shfl_xor(b.id, off)});
  const int lane = threadIdx.x % MLXCEL_WARP_SIZE, warp = threadIdx.x / MLXCEL_WARP_SIZE;
  if (lane == 0) per_warp[warp] = b;
  __syncthreads();
  b = lane < kWarps ? per_warp[lane] : Best{0, -1};
#pragma unroll
  for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1)
    b = BestOp{}(b, Best{gpu_shfl_xor(b.key, off), gpu_shfl_xor(b.id, off)});
  __syncthreads();  // per_warp may be reused by a following call
  return b;
}

// Greedy with nothing else to report or apply (no logprobs, processors, NaN hook): the best token
// straight from the logits, where the general path below copies the row to fp32 scratch and
// reads it again (run 25: 75 us of a 3.5 ms 8B decode step on one SM; one block's pass: 35 us,
// run 26, and still ~55 us of a step under ncu in run 34). Same decisions: the mask, the
// non-finite check, the largest key with the lowest id.
__device__ __forceinline__ bool greedy_fast_row(const SampleParams& a, const SampleRow& p) {
  return a.greedy_fast && p.temperature <= 0.0f && !p.logprobs && p.n_top <= 0 &&
         p.proc_begin == p.proc_end && !p.debug_nan;
}
// The row's allowed-token mask, or null.
__device__ __forceinline__ const std::uint32_t* row_mask(const SampleParams& a,
                                                         const SampleRow& p) {
  return p.mask_row >= 0 ? a.masks + p.mask_row * a.mask_words : nullptr;
}
// f(logits) with the logits as their storage type (bf16, f16 or f32).
template <typename F>
__device__ __forceinline__ void with_logits(const SampleParams& a, F&& f) {
  if (a.logits_code == 1) return f(static_cast<const bf16*>(a.logits));
  if (a.logits_code == 2) return f(static_cast<const f16*>(a.logits));
  f(static_cast<const float*>(a.logits));
}

// The best allowed (key, id) of row[begin, end) over the block, and whether any value there is
// NaN or +inf (every thread gets both).
template <typename L>
__device__ Best scan_best(const L* row, std::int64_t begin, std::int64_t end,
                          const std::uint32_t* mask, int& bad_out) {
  Best best{0, -1};
  int bad = 0;
#pragma unroll 8
  for (std::int64_t t = begin + threadIdx.x; t < end; t += kThreads) {
    const bool allowed = !mask || ((mask[t >> 5] >> (t & 31)) & 1u);
    const float v = allowed ? to_f32(row[t]) : -INFINITY;  // masked tokens count as -inf
    if (isnan(v) || v == INFINITY) bad = 1;
    if (v > -INFINITY)
      best = BestOp{}(best, Best{backend::float_order_key(v), static_cast<std::int32_t>(t)});
  }
  bad_out = __syncthreads_or(bad);
  return block_best(best);
}

__device__ void write_greedy(Best best, int bad, SampleOut* out) {
  *out = SampleOut{};
  if (bad || best.id < 0) {
    out->status = bad ? SampleStatus::kNonFinite : SampleStatus::kAllMasked;
    return;
  }
  out->status = SampleStatus::kOk;
  out->token = best.id;
}

// A greedy row in a.parts slices of kPartLen logits, one block each (sample_parts_kernel), so
// the row is read by many SMs; sample_kernel then combines the parts' (key, id, bad) from the
// row's scratch. BestOp is associative and commutative: the same token as one pass.
constexpr std::int64_t kPartLen = 4 * kThreads;
struct Part {
  std::uint32_t key;
  std::int32_t id;
  std::int32_t bad;
};
__device__ __forceinline__ Part* row_parts(const SampleParams& a, std::int64_t r) {
  return reinterpret_cast<Part*>(a.scratch + r * 2 * a.vocab);
}

template <typename L>
__device__ void greedy_part(const SampleParams& a, const SampleRow& p, const L* logits) {
  const std::uint32_t* mask = row_mask(a, p);
  const L* row = logits + p.logit_row * a.logits_stride;
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kPartLen;
  const std::int64_t end = begin + kPartLen < a.vocab ? begin + kPartLen : a.vocab;
  int bad = 0;
  const Best b = scan_best(row, begin, end, mask, bad);
  if (threadIdx.x == 0) row_parts(a, blockIdx.y)[blockIdx.x] = Part{b.key, b.id, bad};
}

// grid (a.parts, rows): rows the fast path takes leave their parts in scratch; others return.
__global__ void __launch_bounds__(kThreads) sample_parts_kernel(SampleParams a) {
  wait_previous_kernel();
  const SampleRow p = a.rows[blockIdx.y];
  if (!greedy_fast_row(a, p)) return;  // block-uniform
  with_logits(a, [&](auto logits) { greedy_part(a, p, logits); });
}

template <typename L>
__device__ void greedy_fast(const SampleParams& a, const SampleRow& p, const L* logits) {
  int bad = 0;
  const Best best =
      scan_best(logits + p.logit_row * a.logits_stride, 0, a.vocab, row_mask(a, p), bad);
  if (threadIdx.x == 0) write_greedy(best, bad, a.out + blockIdx.x);
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams a) {
  wait_previous_kernel();
  constexpr float kNegInf = -INFINITY;
  const std::int64_t n = a.vocab;
  const SampleRow p = a.rows[blockIdx.x];
  if (greedy_fast_row(a, p)) {  // block-uniform
    if (a.parts > 1) {
      Best b{0, -1};
      int bad = 0;
      if (static_cast<int>(threadIdx.x) < a.parts) {
        const Part q = row_parts(a, blockIdx.x)[threadIdx.x];
        b = Best{q.key, q.id}, bad = q.bad;
      }
      bad = __syncthreads_or(bad);
      b = block_best(b);
      if (threadIdx.x == 0) write_greedy(b, bad, a.out + blockIdx.x);
      return;
    }
    return with_logits(a, [&](auto logits) { greedy_fast(a, p, logits); });
  }
  float* w = a.scratch + static_cast<std::int64_t>(blockIdx.x) * 2 * n;
  float* s = w + n;
  SampleOut* out = a.out + blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);

  // 1. The row in fp32, its processors in order (one thread: they are few and order matters for
  //    a token that has several), then the allowed-token mask.
  for (std::int64_t t = tid; t < n; t += kThreads)
    w[t] = load_code(a.logits, a.logits_code, p.logit_row * a.logits_stride + t);
  __syncthreads();
  if (tid == 0) {
    if (p.debug_nan) w[0] = NAN;
    for (std::int32_t i = p.proc_begin; i < p.proc_end; ++i) {
      const SampleProc e = a.procs[i];
      if (e.token >= 0 && e.token < n) w[e.token] = backend::apply_sample_proc(w[e.token], e.kind, e.value);
    }
  }
  __syncthreads();
  const std::uint32_t* mask = row_mask(a, p);
  std::uint64_t bad = 0;
  Best best{0, -1};
  for (std::int64_t t = tid; t < n; t += kThreads) {
    float v = w[t];
    if (mask && !((mask[t >> 5] >> (t & 31)) & 1u)) w[t] = v = kNegInf;
    if (isnan(v) || v == INFINITY) bad = 1;
    if (v > kNegInf) best = BestOp{}(best, Best{backend::float_order_key(v), static_cast<std::int32_t>(t)});
  }
  bad = block_reduce(bad, Sum64{});
  best = block_reduce(best, BestOp{});
  if (bad || best.id < 0) {
    if (tid == 0) {
      *out = SampleOut{};
      out->status = bad ? SampleStatus::kNonFinite : SampleStatus::kAllMasked;
    }
    return;
  }
  const float mx = w[best.id];

  // 2. Log-probabilities (reported only; skipped when nothing reports them: a pass of double
  //    exponentials over the vocabulary on one SM).
  const int n_top = min(min(p.n_top, backend::kSampleMaxTop), static_cast<int>(n));
  float lse = 0.0f;
  if (p.logprobs || n_top > 0) {  // block-uniform
    double z = 0;
    for (std::int64_t t = tid; t < n; t += kThreads) z += exp(static_cast<double>(w[t] - mx));
    z = block_reduce(z, SumF64{});
    lse = mx + static_cast<float>(log(z));
  }
  Best prev{0, -1};
  for (int j = 0; j < n_top; ++j) {  // the j-th best: the best of those ranked after prev
    Best b{0, -1};
    for (std::int64_t t = tid; t < n; t += kThreads) {
      const Best c{backend::float_order_key(w[t]), static_cast<std::int32_t>(t)};
      if (prev.id < 0 || before(prev, c)) b = BestOp{}(b, c);
    }
    b = block_reduce(b, BestOp{});
    if (tid == 0) {
      out->top_ids[j] = b.id;
      out->top_logprobs[j] = w[b.id] - lse;
    }
    prev = b;
  }
  std::int32_t chosen = best.id;

  if (p.temperature > 0.0f) {
    // 3. Filters on s = logit - max: top-p, min-p, top-k (removed: -inf).
    for (std::int64_t t = tid; t < n; t += kThreads) s[t] = w[t] - mx;
    __syncthreads();
    if (p.top_p > 0.0f && p.top_p < 1.0f) {
      std::uint64_t total = 0;
      for (std::int64_t t = tid; t < n; t += kThreads) total += backend::sample_weight(s[t]);
      total = block_reduce(total, Sum64{});
      // The largest key K whose mass of tokens with key >= K reaches top_p of the total.
      std::uint64_t lo = 0, hi = 0x100000000ull;
      while (hi - lo > 1) {
        const std::uint64_t mid = (lo + hi) / 2;
        std::uint64_t mass = 0;
        for (std::int64_t t = tid; t < n; t += kThreads)
          if (backend::float_order_key(s[t]) >= mid) mass += backend::sample_weight(s[t]);
        mass = block_reduce(mass, Sum64{});
        if (backend::nucleus_reached(mass, total, p.top_p)) lo = mid;
        else hi = mid;
      }
      for (std::int64_t t = tid; t < n; t += kThreads)
        if (backend::float_order_key(s[t]) < lo) s[t] = kNegInf;
      __syncthreads();
    }
    if (p.log_min_p > kNegInf) {
      std::uint32_t kth = 0;
      std::int64_t tie_limit = -1;
      const bool keep = p.min_keep > 1;
      if (keep) top_m(s, n, min(static_cast<std::int64_t>(p.min_keep), n), &kth, &tie_limit);
      for (std::int64_t t = tid; t < n; t += kThreads)
        if (s[t] < p.log_min_p && !(keep && kept(s[t], t, kth, tie_limit))) s[t] = kNegInf;
      __syncthreads();
    }
    if (p.top_k > 0 && p.top_k < n) {
      std::uint32_t kth = 0;
      std::int64_t tie_limit = -1;
      top_m(s, n, p.top_k, &kth, &tie_limit);
      for (std::int64_t t = tid; t < n; t += kThreads)
        if (!kept(s[t], t, kth, tie_limit)) s[t] = kNegInf;
      __syncthreads();
    }

    // 4. The categorical draw: integer weights at the temperature, the first token (in id order)
    //    whose prefix sum exceeds the target. Each thread owns a contiguous chunk.
    const std::int64_t chunk = (n + kThreads - 1) / kThreads;
    const std::int64_t begin = min(n, tid * chunk), end = min(n, begin + chunk);
    std::uint64_t mine = 0;
    for (std::int64_t t = begin; t < end; ++t)
      if (s[t] != kNegInf) mine += backend::sample_weight(s[t] * p.inv_temperature);
    __shared__ std::uint64_t prefix[kThreads];
    __shared__ std::uint64_t total_sh;
    __shared__ std::int32_t chosen_sh;
    prefix[tid] = mine;
    __syncthreads();
    if (tid == 0) {  // exclusive scan of the chunk sums (exact: integers)
      std::uint64_t acc = 0;
      for (int i = 0; i < kThreads; ++i) {
        const std::uint64_t v = prefix[i];
        prefix[i] = acc;
        acc += v;
      }
      total_sh = acc;
      chosen_sh = best.id;
    }
    __syncthreads();
    const std::uint64_t target = backend::draw_target(p.seed, p.stream, p.position, total_sh);
    if (mine > 0 && prefix[tid] <= target && target < prefix[tid] + mine) {
      std::uint64_t acc = prefix[tid];
      for (std::int64_t t = begin; t < end; ++t) {
        if (s[t] == kNegInf) continue;
        acc += backend::sample_weight(s[t] * p.inv_temperature);
        if (acc > target) {
          chosen_sh = static_cast<std::int32_t>(t);
          break;
        }
      }
    }
    __syncthreads();
    chosen = chosen_sh;
  }
  if (tid == 0) {
    out->status = SampleStatus::kOk;
    out->token = chosen;
    out->logprob = p.logprobs ? w[chosen] - lse : 0.0f;
    out->n_top = n_top;
  }
}

}  // namespace

namespace kernels {

void sample(const backend::SampleArgs& a, const Stream& s) {
  if (a.n <= 0) return;
  SampleParams p;
  p.logits = a.logits.data;
  p.logits_code = float_code(a.logits.dtype);
  p.logits_stride = a.logits.stride;
  p.vocab = a.logits.cols;
  p.rows = a.rows;
  p.procs = a.procs;
  p.masks = a.masks;
  p.mask_words = a.mask_words;
  p.scratch = a.scratch;
  p.out = a.out;
  // On by default since run 26 (tests and selftest passed with it; 75 -> 35 us per 8B step);
  // MLXCEL_GPU_SAMPLE_FAST=0 sends plain greedy rows through the general path (same tokens).
  static const int fast = env_int("MLXCEL_GPU_SAMPLE_FAST", 1) != 0 ? 1 : 0;
  p.greedy_fast = fast;
  // Greedy rows over many SMs first (sample_parts_kernel; MLXCEL_GPU_SAMPLE_PARTS=0: one block
  // per row scans it all, as before). Rows are at most 64 (a decode step's), so grid.y holds them.
  static const bool parts_on = env_int("MLXCEL_GPU_SAMPLE_PARTS", 1) != 0;
  const std::int64_t parts = (p.vocab + kPartLen - 1) / kPartLen;
  p.parts = fast && parts_on && parts > 1 && parts <= kThreads && a.n <= 65535
                ? static_cast<int>(parts) : 0;
  if (p.parts > 1) {
    launch_kernel(sample_parts_kernel, dim3(static_cast<unsigned>(p.parts),
                                            static_cast<unsigned>(a.n)),
                  kThreads, 0, s, p);
    check_launch("sample", s.device());
  }
  launch_kernel(sample_kernel, static_cast<unsigned>(a.n), kThreads, 0, s, p);
  check_launch("sample", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
