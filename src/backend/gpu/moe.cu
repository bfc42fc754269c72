// Mixture of experts as mlx-lm's SwitchGLU: router softmax (fp32, rounded) with the top-k experts
// and optional renormalization; then per (token, chosen expert) the expert's gate/up GEMV,
// the gated activation, the down GEMV, and the weighted sum of the rounded products in fp32.
// Prefill steps may group the (token, expert) rows by expert first, so that the matrix-unit
// GEMM reads each chosen expert's matrices once per 128 rows instead of once per row
// (see group_experts). Same source for CUDA and HIP.
#include <algorithm>

#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/linear.cuh"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {
namespace {

// mlx-lm's SwitchGLU routing of one token by one warp: softmax over the E router logits in
// fp32, rounded; the top k in descending probability, ties to the larger expert index
// (mx.argpartition's (value, index) ordering keeps the last k); optional renormalization by
// their rounded sum. Deterministic and independent of the batch. prob (E floats of shared
// memory) is touched only by its owner lane: lane l holds the experts l, l + warp, ...,
// computes their probabilities and marks a chosen one taken, so the warp needs no barrier.
template <typename T>
__device__ __forceinline__ void route_token(const T* in, std::int64_t E, int K, int norm,
                                            std::int32_t* experts, float* weights, int round,
                                            float* prob) {
  const int lane = threadIdx.x % MLXCEL_WARP_SIZE;
  float mx = -INFINITY;
  for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE)
    mx = fmaxf(mx, to_f32(in[e]));
  mx = warp_max(mx);
  float z = 0.0f;
  for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE) {
    const float v = expf(to_f32(in[e]) - mx);
    prob[e] = v;
    z += v;
  }
  z = warp_sum(z);
  const float inv = 1.0f / z;
  for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE) prob[e] = rnd(prob[e] * inv, round);
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) {
    float best = -1.0f;
    int bi = -1;
    for (std::int64_t e = lane; e < E; e += MLXCEL_WARP_SIZE) {
      const float v = prob[e];
      if (v > best || (v == best && e > bi)) {
        best = v;
        bi = static_cast<int>(e);
      }
    }
#pragma unroll
    for (int off = MLXCEL_WARP_SIZE / 2; off > 0; off >>= 1) {
      const float ov = gpu_shfl_xor(best, off);
      const int oi = gpu_shfl_xor(bi, off);
      if (ov > best || (ov == best && oi > bi)) {
        best = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      experts[j] = bi;
      weights[j] = best;
    }
    if (bi % MLXCEL_WARP_SIZE == lane) prob[bi] = -2.0f;  // taken (probabilities are >= 0)
    sum += best;
  }
  if (norm && lane == 0) {
    const float sr = rnd(sum, round);
    for (int j = 0; j < K; ++j) weights[j] = rnd(weights[j] / sr, round);
  }
}

// route_token's result from registers, where the probabilities round to 16 bits (bf16 / f16
// activations) and E <= kRouteHeld * warp: lane l holds experts l, l + warp, ... as keys
// ((16-bit probability + 1) << 16 | expert): nonnegative 16-bit floats order as their bits, so
// the largest key is the largest probability, ties to the larger expert, exactly route_token's
// order; 0 marks a taken expert. Each of the K rounds is one warp max of a key (redux.sync on
// sm_80+) instead of a shared-memory scan and a butterfly of two shuffles per level. The softmax
// runs in route_token's order (per lane in e order, then the warp sum), so the bits are its.
// Fewer than K finite probabilities: the rest are (-1, -1), as route_token leaves them.
constexpr int kRouteHeld = 8;

template <typename T>
__device__ __forceinline__ void route_token_held(const T* in, int E, int K, int norm,
                                                 std::int32_t* experts, float* weights, int round) {
  const int lane = threadIdx.x % MLXCEL_WARP_SIZE;
  float v[kRouteHeld];
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kRouteHeld; ++i) {
    const int e = lane + i * MLXCEL_WARP_SIZE;
    v[i] = e < E ? to_f32(in[e]) : 0.0f;
    if (e < E) mx = fmaxf(mx, v[i]);
  }
  mx = warp_max(mx);
  float z = 0.0f;
#pragma unroll
  for (int i = 0; i < kRouteHeld; ++i) {
    if (lane + i * MLXCEL_WARP_SIZE < E) {
      v[i] = expf(v[i] - mx);
      z += v[i];
    }
  }
  z = warp_sum(z);
  const float inv = 1.0f / z;
  const bool bf = round == kRoundBf16;
  std::uint32_t key[kRouteHeld];
#pragma unroll
  for (int i = 0; i < kRouteHeld; ++i) {
    const int e = lane + i * MLXCEL_WARP_SIZE;
    const float p = rnd(v[i] * inv, round);
    const std::uint32_t b = bf ? bf16(p).bits : f16(p).bits;
    // NaN (z or a logit not finite) is never chosen, as in route_token.
    key[i] = e < E && p == p ? ((b + 1u) << 16) | static_cast<std::uint32_t>(e) : 0u;
  }
  float sum = 0.0f;
  for (int j = 0; j < K; ++j) {
    std::uint32_t own = key[0];
#pragma unroll
    for (int i = 1; i < kRouteHeld; ++i) own = key[i] > own ? key[i] : own;
    const std::uint32_t best = warp_max_key(own);
    const int bi = best ? static_cast<int>(best & 0xFFFFu) : -1;
    const std::uint16_t pb = static_cast<std::uint16_t>((best >> 16) - 1u);
    const float bp = !best ? -1.0f
                     : bf  ? bf16::from_bits(pb).to_float()
                           : f16::from_bits(pb).to_float();
    if (lane == 0) {
      experts[j] = bi;
      weights[j] = bp;
    }
#pragma unroll
    for (int i = 0; i < kRouteHeld; ++i)
      if (best && key[i] == best) key[i] = 0u;  // taken
    sum += bp;
  }
  if (norm && lane == 0) {
    const float sr = rnd(sum, round);
    for (int j = 0; j < K; ++j) weights[j] = rnd(weights[j] / sr, round);
  }
}

// MLXCEL_GPU_MOE_ROUTE_HELD=1: route_token_held where it applies. Off until measured.
bool route_held_on() {
  static const bool on = env_int("MLXCEL_GPU_MOE_ROUTE_HELD", 0) != 0;
  return on;
}

// One warp per token (route_token: the probabilities live in shared memory, E floats; held:
// route_token_held, in registers).
template <typename T>
__global__ void moe_route_kernel(const T* gates, std::int64_t stride, std::int64_t E, int K,
                                 int norm, std::int32_t* experts, float* weights, int round,
                                 int held) {
  wait_previous_kernel();
  extern __shared__ float prob[];
  const std::int64_t t = blockIdx.x;
  if (held)
    route_token_held<T>(gates + t * stride, static_cast<int>(E), K, norm, experts + t * K,
                        weights + t * K, round);
  else
    route_token<T>(gates + t * stride, E, K, norm, experts + t * K, weights + t * K, round, prob);
}

// out[t] = round(sum_j round(ys[t * K + j] * w[t * K + j])), fp32 sum in j order; accumulating,
// out[t] = round(out[t] + that), the residual add (each element read and written by its thread).
// grid (T, ceil(H / kCombineThreads)): one element per thread. A single block per token walked
// the hidden size alone on one SM (12.8 us per 30B decode layer under ncu, run 24).
constexpr int kCombineThreads = 256;
template <typename T>
__global__ void moe_combine_kernel(const T* ys, std::int64_t H, int K, const float* w, T* out,
                                   std::int64_t out_stride, int round, int accumulate) {
  wait_previous_kernel();
  const std::int64_t t = blockIdx.x;
  const std::int64_t d = static_cast<std::int64_t>(blockIdx.y) * kCombineThreads + threadIdx.x;
  if (d < H) {
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) acc += rnd(to_f32(ys[(t * K + j) * H + d]) * w[t * K + j], round);
    const std::int64_t i = t * out_stride + d;
    store(out, i, accumulate ? to_f32(out[i]) + rnd(acc, round) : acc, round);
  }
}

// --- Grouping expert rows for the prefill GEMM ----------------------------------------------
// The R = T * top_k rows of an expert linear (row t * top_k + j: token t's j-th choice), grouped
// by expert on the device (the choices never leave it): order[] lists each expert's rows, and
// each expert's run is cut into tiles of kGemmTileRows for gemm_mma's grid. Rows land in their
// expert's run in atomic order; the GEMM's result for a row does not depend on its place (see
// gemm_mma.cu), so this is deterministic where it matters.
constexpr int kGroupThreads = 1024;
constexpr std::int64_t kGroupMaxExperts = 8192;  // one int of shared memory per expert
// Steps of up to this many tokens (decode) keep the expert-row GEMV, batch invariant like the
// dense linears' <= 64-row GEMV; longer ones are prefill, where the dense linears take the GEMM.
constexpr std::int64_t kGroupMinTokens = 64;

// One block. cursor[e] counts expert e's rows, then (after the scan) is its next free slot.
// Thread t owns experts [t * per, t * per + per): their row and tile totals go through an
// inclusive scan over the threads (Hillis-Steele in shared memory, any warp width).
__global__ void __launch_bounds__(kGroupThreads)
    moe_group_kernel(const std::int32_t* experts, std::int64_t R, int E, std::int32_t* order,
                     kernels::ExpertTile* tiles, std::int32_t* tile_count) {
  wait_previous_kernel();
  extern __shared__ std::int32_t cursor[];
  __shared__ std::int32_t scan_rows[kGroupThreads], scan_tiles[kGroupThreads];
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += kGroupThreads) cursor[e] = 0;
  __syncthreads();
  for (std::int64_t i = tid; i < R; i += kGroupThreads) {
    const int e = experts[i];
    if (e >= 0 && e < E) atomicAdd(&cursor[e], 1);
  }
  __syncthreads();
  const int per = (E + kGroupThreads - 1) / kGroupThreads;
  const int e0 = min(E, tid * per), e1 = min(E, e0 + per);
  int rows = 0, nt = 0;
  for (int e = e0; e < e1; ++e) {
    rows += cursor[e];
    nt += (cursor[e] + kGemmTileRows - 1) / kGemmTileRows;
  }
  scan_rows[tid] = rows;
  scan_tiles[tid] = nt;
  __syncthreads();
  for (int off = 1; off < kGroupThreads; off <<= 1) {
    const int a = tid >= off ? scan_rows[tid - off] : 0;
    const int b = tid >= off ? scan_tiles[tid - off] : 0;
    __syncthreads();
    scan_rows[tid] += a;
    scan_tiles[tid] += b;
    __syncthreads();
  }
  int first = scan_rows[tid] - rows, tile = scan_tiles[tid] - nt;
  for (int e = e0; e < e1; ++e) {
    const int c = cursor[e];
    for (int j = 0; j < c; j += kGemmTileRows)
      tiles[tile++] = kernels::ExpertTile{e, first + j, min(kGemmTileRows, c - j), 0};
    cursor[e] = first;
    first += c;
  }
  if (tid == kGroupThreads - 1) *tile_count = scan_tiles[tid];
  __syncthreads();
  for (std::int64_t i = tid; i < R; i += kGroupThreads) {
    const int e = experts[i];
    if (e >= 0 && e < E) order[atomicAdd(&cursor[e], 1)] = static_cast<std::int32_t>(i);
  }
}

// Whether moe_experts groups its rows: a prefill step (more than kGroupMinTokens tokens) in
// bf16 / f16 with the expert count known (the GEMM itself then still decides per matrix whether
// it can run, else the rows take the GEMV as before). On by default for CUDA: run 30 (H100)
// measured the 30B's pp512 at 1,244 -> 5,750 tok/s and batch 16's 8,192-token prefill at 1,224
// -> 8,471, decode unchanged, test_backend_ops and the selftest passing. Off on HIP, whose
// grouped WMMA GEMM has run on no GPU (it runs only under MLXCEL_GPU_GEMM_MMA=1 there).
// MLXCEL_GPU_MOE_GEMM=0 / 1 overrides.
#if defined(MLXCEL_GPU_CUDA)
constexpr int kMoeGemmDefault = 1;
#else
constexpr int kMoeGemmDefault = 0;
#endif
bool group_experts(const backend::MoeExpertsArgs& a) {
  static const bool on = env_int("MLXCEL_GPU_MOE_GEMM", kMoeGemmDefault) != 0;
  return on && a.x.rows > kGroupMinTokens && a.num_experts > 0 &&
         a.num_experts <= kGroupMaxExperts &&
         (a.x.dtype == DType::kBF16 || a.x.dtype == DType::kF16);
}

// Whether the gate and up products go to linear_experts as one pair (one decode GEMV launch for
// both, where the GEMV can; linear.cu splits them elsewhere): the two matrices must share shape,
// format and expert strides. On by default: run 30 (H100) measured the 30B's tg128 at 287.7 ->
// 302.9 tok/s (+5.3 %), prefill unchanged; MLXCEL_GPU_MOE_PAIR=0 turns it off.
bool pair_gate_up(const backend::MoeExpertsArgs& a) {
  static const bool on = env_int("MLXCEL_GPU_MOE_PAIR", 1) != 0;
  return on && kernels::same_layout(a.gate, a.up);
}

// Scratch after the three activation buffers: order (R ints), the tiles, the tile count. At
// most R / 128 full tiles plus one partial tile per expert that has rows.
struct GroupLayout {
  std::size_t order = 0, tiles = 0, count = 0, end = 0;
  std::int64_t max_tiles = 0;
};
std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
GroupLayout group_layout(std::size_t start, std::int64_t R, std::int64_t E) {
  GroupLayout g;
  g.max_tiles = R / kGemmTileRows + std::min(E, R);
  g.order = align_up(start, 256);
  g.tiles = align_up(g.order + static_cast<std::size_t>(R) * sizeof(std::int32_t), 16);
  g.count = g.tiles + static_cast<std::size_t>(g.max_tiles) * sizeof(kernels::ExpertTile);
  g.end = g.count + 16;
  return g;
}

}  // namespace

namespace kernels {

void moe_route(const backend::MoeRouteArgs& a, const Stream& s) {
  const std::int64_t T = a.gates.rows, E = a.gates.cols;
  if (T == 0) return;
  MLXCEL_CHECK(a.top_k > 0 && a.top_k <= E && E <= 8192, ErrorCategory::kInternal,
               "gpu moe_route: top_k / expert count");
  MLXCEL_CHECK(!a.with_router || (a.router.y.data == a.gates.data && a.router.y.rows == T &&
                                  a.router.w.n == E),
               ErrorCategory::kInternal, "gpu moe_route: the router's output is not the gates");
  if (a.with_router) linear(a.router, s);
  dispatch_act(a.gates.dtype, "moe_route", [&](auto tag) {
    using A = decltype(tag);
    const int round = round_code(a.round);
    const bool held = route_held_on() && E <= kRouteHeld * MLXCEL_WARP_SIZE &&
                      (round == kRoundBf16 || round == kRoundF16);
    launch_kernel(moe_route_kernel<A>, static_cast<unsigned>(T), MLXCEL_WARP_SIZE,
                  held ? 0 : E * sizeof(float), s, static_cast<const A*>(a.gates.data),
                  a.gates.stride, E, a.top_k, a.norm_topk_prob ? 1 : 0, a.experts, a.weights, round,
                  held ? 1 : 0);
  });
  check_launch("moe_route", s.device());
}

// The gate, up and down products of every row ([R, I], [R, I], [R, H]), then the grouping.
std::size_t moe_experts_scratch_bytes(const backend::MoeExpertsArgs& a) {
  const std::size_t rows = static_cast<std::size_t>(a.x.rows) * static_cast<std::size_t>(a.top_k);
  const std::size_t es = dtype_size(a.x.dtype);
  const std::size_t I = static_cast<std::size_t>(a.gate.n), H = static_cast<std::size_t>(a.x.cols);
  const std::size_t acts = rows * (2 * I + H) * es;
  if (!group_experts(a)) return acts + 256;
  return group_layout(acts, static_cast<std::int64_t>(rows), a.num_experts).end;
}

void moe_experts(const backend::MoeExpertsArgs& a, void* scratch, const Stream& s) {
  const std::int64_t T = a.x.rows, H = a.x.cols, I = a.gate.n, K = a.top_k, R = T * K;
  if (T == 0) return;
  MLXCEL_CHECK(a.down.n == H && a.down.k == I && a.up.n == I && a.x.dtype == a.out.dtype,
               ErrorCategory::kInternal, "gpu moe_experts: shapes");
  const std::size_t es = dtype_size(a.x.dtype);
  char* base = static_cast<char*>(scratch);
  backend::Act ga{base, a.x.dtype, R, I, I};
  backend::Act ub{base + static_cast<std::size_t>(R * I) * es, a.x.dtype, R, I, I};
  backend::Act ys{base + static_cast<std::size_t>(2 * R * I) * es, a.x.dtype, R, H, H};
  ExpertLinear l;
  if (group_experts(a)) {
    const GroupLayout g = group_layout(static_cast<std::size_t>(R * (2 * I + H)) * es, R,
                                       a.num_experts);
    auto* order = reinterpret_cast<std::int32_t*>(base + g.order);
    auto* tiles = reinterpret_cast<ExpertTile*>(base + g.tiles);
    auto* count = reinterpret_cast<std::int32_t*>(base + g.count);
    launch_kernel(moe_group_kernel, 1, kGroupThreads,
                  static_cast<std::size_t>(a.num_experts) * sizeof(std::int32_t), s, a.experts, R,
                  static_cast<int>(a.num_experts), order, tiles, count);
    check_launch("moe_experts (grouping)", s.device());
    l.tiles = ExpertTiles{order, tiles, count, g.max_tiles};
  }
  l.x = a.x;
  l.x_div = K;
  l.experts = a.experts;
  l.round = a.round;
  l.w = a.gate;
  l.y = ga;
  if (pair_gate_up(a)) {
    l.pair = &a.up;
    l.pair_y = ub;
    linear_experts(l, s);
    l.pair = nullptr;
  } else {
    linear_experts(l, s);
    l.w = a.up;
    l.y = ub;
    linear_experts(l, s);
  }
  l.x = ga;
  l.x_div = 1;
  l.w = a.down;
  l.y = ys;
  gated_activation({a.act, ga, ub, ga, a.round}, s);
  linear_experts(l, s);
  dispatch_act(a.out.dtype, "moe_experts", [&](auto tag) {
    using A = decltype(tag);
    const dim3 grid(static_cast<unsigned>(T),
                    static_cast<unsigned>((H + kCombineThreads - 1) / kCombineThreads));
    launch_kernel(moe_combine_kernel<A>, grid, kCombineThreads, 0, s,
        static_cast<const A*>(ys.data), H, static_cast<int>(K), a.weights,
        static_cast<A*>(a.out.data), a.out.stride, round_code(a.round), a.accumulate ? 1 : 0);
  });
  check_launch("moe_experts (combine)", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
