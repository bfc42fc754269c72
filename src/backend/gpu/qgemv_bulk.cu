// Decode GEMV over MLX affine 4-bit weights (up to 64 activation rows: 1-2 per block, or 8 per
// block reusing each stage for 4 row pairs) with the weights streamed into shared memory by bulk
// copies (cp.async.bulk + mbarrier, CUDA sm_90+).
//
// Why: qgemv_mma_gpl_kernel loads a lane's weights into registers, so the bytes a warp has in
// flight are bounded by its registers (~2 KB a warp, 16 warps an SM) and each chunk waits a full
// memory round trip before its mma: the 8B decode's GEMVs ran at ~1.6 TB/s of the H200's 4.2
// (run 25, 22 % occupancy). Here each warp keeps kStages stages of its 16 weight rows in flight
// in a shared-memory ring (~4 KB of codes per stage), filled by the copy engine with no
// registers held, while it computes on the stage that has landed; blocks stay resident and walk
// the column blocks (one block per SM), so no wave of blocks waits for the last one.
//
// Arithmetic: exactly qgemv_mma_gpl_kernel's (qgemv_mma.cu): lane t of a quad holds group 4c + t
// of its two rows, the mma's N separates the groups, per group d = sum (off + c) x from fresh
// accumulators and e = sum x from the same mma against ones, acc += s d + (b - off s) e, the four
// groups of a chunk folded as (j0 + j1) + (j2 + j3), K slices in warp order, the same `ks`. Only
// where the operands come from differs (and e, which depends on x alone, is computed once per
// block instead of once per tile), so a row's result is bit-identical to the gpl kernel's, which
// serves more rows: batch invariance holds across the two.
//
// Fusions (backend::LinearArgs): the output may accumulate into y (the residual add, in
// store_lin), and the input norm may run in the prologue (fused_norm): every block normalizes
// the 1-2 activation rows itself, as rms_norm.cu would, while its first stages are in flight,
// so a dense decoder layer needs no separate norm or add launch.
//
// Shared memory (dynamic, one block per SM): per warp kStages slots of [16 rows x 256 code bytes
// (+16 pad)][16 rows of scales][16 rows of biases]; the block's activation rows, each group's 8
// x words pre-permuted into the mma's B order (+1 pad unit per group); e per (row, group).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/gpu/activation.cuh"
#include "backend/gpu/mma.cuh"
#include "backend/gpu/qgemv_mma.cuh"
#include "backend/gpu/reduce.cuh"
#include "backend/gpu/rms_norm.cuh"

#if defined(MLXCEL_GPU_CUDA)
namespace mlxcel::gpu::qmma {
namespace {

constexpr int kMaxStages = 4;               // slots per warp: S = 2..4, 3 by default
constexpr int kBulkThreads = kWarps * MLXCEL_WARP_SIZE;
constexpr int kRowBytes = 256;               // a stage's code bytes of one weight row
constexpr int kCodePitch = kRowBytes + 16;   // rows g, g + 1 start in different bank quads
constexpr int kBarBytes = kWarps * kMaxStages * 8;
constexpr int kRedOffset = 256;              // after the barriers
constexpr int kMaxNpb = 4;                  // row pairs per block: 1 (1-2 rows) or 4 (3-8 rows)
constexpr int kRedBytes = kWarps * kMaxNpb * 2 * MLXCEL_WARP_SIZE * 4;

// --- sm_90 bulk copies and transaction barriers (PTX ISA 8.0) ----------------------------------
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(std::uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// One arrival that also expects `bytes` of copies to complete on the barrier's current phase.
__device__ __forceinline__ void mbar_expect(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t ok;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}
// Waits for the phase of the given parity to complete. A copy that never lands (a bad address
// faults the copy instead) would hang the step; the bound turns that into a device fault.
__device__ __forceinline__ void mbar_wait(std::uint64_t* bar, std::uint32_t parity) {
  for (std::uint32_t spins = 0; !mbar_try_wait(bar, parity); ++spins)
    if (spins > (1u << 22)) __trap();
}
// An L2 policy that evicts these lines first: the weights stream through once per step, and
// would otherwise push out the activations, the residual stream and the KV cache.
__device__ __forceinline__ std::uint64_t evict_first_policy() {
  std::uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, std::uint32_t bytes,
                                          std::uint64_t* bar, std::uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;\n" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
      : "memory");
}
// Orders this thread's earlier shared-memory reads before later bulk copies into the same slot.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The fused input norm (p.norm_w set): x = rms_norm(norm_src) for the block's rows with the
// reduction order of rms_norm.cu's kernel (rms_norm.cuh: norm_threads(cols) threads, emulated
// here by each thread standing in for norm_threads / kBulkThreads of them, same lanes and
// warp order), so the values are the unfused norm's bits. Every block normalizes the rows
// (a few KB from L2) into xs, permuted as the plain path below; block 0 also writes them to x.
template <typename T, int GW, int GK>
__device__ void fused_norm(const LinParams& p, std::int64_t m0, int rows, int mc, uint4* xs,
                           int x_units, float* partial) {
  const std::int64_t cols = p.w.k;
  const int nb = norm_threads(cols), per = nb / kBulkThreads;  // emulated threads per thread
  const int lane = threadIdx.x % MLXCEL_WARP_SIZE, warp = threadIdx.x / MLXCEL_WARP_SIZE;
  for (int r = 0; r < rows; ++r) {
    if (r >= mc) {
      for (int u = threadIdx.x; u < x_units; u += kBulkThreads) xs[r * x_units + u] = make_uint4(0, 0, 0, 0);
      continue;
    }
    const T* src = static_cast<const T*>(p.norm_src) + (m0 + r) * p.norm_stride;
    for (int j = 0; j < 4 && j < per; ++j) {
      const int v = static_cast<int>(threadIdx.x) + j * kBulkThreads;  // the emulated thread
      float ss = 0.0f;
#pragma unroll
      for (int i = 0; i < kNormHeld; ++i) {
        const std::int64_t c = v + static_cast<std::int64_t>(i) * nb;
        const float e = c < cols ? to_f32(src[c]) : 0.0f;
        ss = fmaf(e, e, ss);
      }
      for (std::int64_t c = v + static_cast<std::int64_t>(kNormHeld) * nb; c < cols; c += nb) {
        const float e = to_f32(src[c]);
        ss = fmaf(e, e, ss);
      }
      ss = warp_sum(ss);
      if (lane == 0) partial[warp + j * kWarps] = ss;  // emulated warp v / 32
    }
    __syncthreads();
    float total = 0.0f;
    for (int i = 0; i < nb / MLXCEL_WARP_SIZE; ++i) total += partial[i];
    const float inv = 1.0f / sqrtf(total / static_cast<float>(cols) + p.norm_eps);
    // LinParams::x is the GEMV's input (const there); here the kernel produces it.
    T* xr = static_cast<T*>(const_cast<void*>(p.x)) + (m0 + r) * p.x_stride;
    for (std::int64_t c = threadIdx.x; c < cols; c += kBulkThreads) {
      const T y = from_f32<T>(rnd(rnd(to_f32(src[c]) * inv, p.round) * p.norm_w[c], p.round));
      if (blockIdx.x == 0) xr[c] = y;
      // Element e of a group's 8-element unit w sits at slot 2 (e % 4) + e / 4 once permuted
      // into (b0, b1, b0', b1'): the layout the plain path builds with __byte_perm.
      const int o = static_cast<int>(c % GK), w = o / 8, e = o % 8;
      reinterpret_cast<T*>(&xs[r * x_units + (c / GK) * (GW + 1) + w])[2 * (e % 4) + e / 4] = y;
    }
    __syncthreads();  // `partial` is reused by the next row
  }
}

// The gated epilogue (p.gated_out set; W = [gate; up], I = n / 2 rows each, I % 8 == 0): tile ti
// holds gate rows 8 ti .. 8 ti + 7 in its rows 0-7 and the same up rows in 8-15, so a lane ends
// with both halves of its column and writes round(round(act(g)) * u) where the plain kernel
// would write g and u: the rounded values the separate gated kernel reads.
template <typename T, int NP>
__device__ __forceinline__ void sum_slices_gated(const LinParams& p, int ks, const float* red,
                                                 int warp, int lane, std::int64_t ti,
                                                 std::int64_t m0, int mc, std::int64_t half) {
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    const float v[2] = {sum_slices<NP>(red, ks, warp, lane, q, 0),
                        sum_slices<NP>(red, ks, warp, lane, q, 1)};
    const int row = 2 * q + t / 2;
    const std::int64_t n = 8 * ti + g;
    if (row < mc && n < half) {
      const float gv = rnd(v[0] + (p.bias ? p.bias[n] : 0.0f), p.round);
      const float uv = rnd(v[1] + (p.bias ? p.bias[half + n] : 0.0f), p.round);
      store(static_cast<T*>(p.gated_out), (m0 + row) * p.gated_stride + n,
            rnd(activate(p.gated_act, gv), p.round) * uv, p.round);
    }
  }
}

struct BulkParams {
  MmaParams mp;
  std::int64_t col_blocks;  // column blocks of kWarps / ks tiles
  int scale_pitch;          // bytes of one row's scales (or biases) in a slot
  int slot_bytes;
  int x_units;              // 16-byte units of one activation row in shared memory
  int e_offset, x_offset, ring_offset;
};

// grid (resident blocks (<= one per SM), row blocks of 2 NPB rows): each block walks column
// blocks blockIdx.x + j * gridDim.x for its rows; every row pair of a chunk reuses the chunk's
// codes and scales (NPB 1: 1-2 rows; 4: up to 8 rows per block).
template <typename T, int WPL, int kStages, int NPB>
__global__ void __launch_bounds__(kBulkThreads, 1) qgemv_bulk_kernel(BulkParams bp) {
#if __CUDA_ARCH__ >= 900
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int GW = 4 * WPL;                // code words of one group row
  constexpr int GB = 16 * WPL;               // bytes of one group row
  constexpr int GK = 32 * WPL;               // group size
  constexpr int CB = 4 * GB;                 // bytes of one chunk (4 groups) row
  constexpr int CPS = kRowBytes / CB;        // chunks per stage
  const MmaParams& mp = bp.mp;
  const LinParams& p = mp.p;
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
  const int g = lane / 4, t = lane % 4;
  const int tile = warp / mp.ks, kw = warp % mp.ks;
  const std::int64_t G = mp.groups, chunks = G / 4;
  const std::int64_t c_begin = chunks * kw / mp.ks, c_end = chunks * (kw + 1) / mp.ks;
  const int ns = static_cast<int>((c_end - c_begin + CPS - 1) / CPS);  // stages per column block
  const std::int64_t units = (bp.col_blocks - blockIdx.x + gridDim.x - 1) / gridDim.x;
  const std::int64_t total = units * ns;  // this warp's stages
  const int code = p.w.scales_code, sb = code == 0 ? 4 : 2;
  constexpr int RB = 2 * NPB;  // rows per block
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.y) * RB;
  const int mc = static_cast<int>(p.m - m0 < RB ? p.m - m0 : RB);
  const std::int64_t n_last = p.w.n - 1;
  const std::int64_t w_row = p.w.k / 2, s_row = G * sb;  // bytes per weight / scale row

  auto* bars = reinterpret_cast<std::uint64_t*>(smem) + warp * kStages;
  const std::uint64_t policy = evict_first_policy();
  float* red = reinterpret_cast<float*>(smem + kRedOffset);
  float* es = reinterpret_cast<float*>(smem + bp.e_offset);
  uint4* xs = reinterpret_cast<uint4*>(smem + bp.x_offset);
  unsigned char* ring = smem + bp.ring_offset + warp * kStages * bp.slot_bytes;

  const bool gated = p.gated_out != nullptr;
  const std::int64_t half = p.w.n / 2;
  auto tile_of = [&](std::int64_t i) {  // the matrix tile of stage i
    const std::int64_t cb = blockIdx.x + (i / ns) * gridDim.x;
    return cb * (kWarps / mp.ks) + tile;
  };
  // Stage i into slot i % kStages: lanes 0-15 copy row r's codes, lanes 16-31 its scales and
  // biases (16-byte aligned spans around the stage's groups: `shift` bytes before them).
  auto issue = [&](std::int64_t i) {
    std::uint64_t* bar = &bars[i % kStages];
    const std::int64_t c0 = c_begin + (i % ns) * CPS;
    const int nc = static_cast<int>(c_end - c0 < CPS ? c_end - c0 : CPS);
    const std::int64_t s0 = 4 * c0 * sb, a0 = s0 & ~std::int64_t{15};
    const std::int64_t a1 = (4 * (c0 + nc) * sb + 15) & ~std::int64_t{15};
    const auto code_bytes = static_cast<std::uint32_t>(nc * CB);
    const auto span = static_cast<std::uint32_t>(a1 - a0);
    if (lane == 0) mbar_expect(bar, 16 * code_bytes + 32 * span);
    __syncwarp();
    unsigned char* slot = ring + (i % kStages) * bp.slot_bytes;
    const int r = lane % 16;
    const std::int64_t ti = tile_of(i);
    // The weight row of tile row r (rows past the end read the last row; not stored): 16 ti + r,
    // or gated, gate row 8 ti + r for r < 8 and up row I + 8 ti + r - 8.
    std::int64_t n = gated ? (r < 8 ? 8 * ti + r : half + 8 * ti + r - 8) : kTileCols * ti + r;
    if (gated && r < 8 && n > half - 1) n = half - 1;
    if (n > n_last) n = n_last;
    if (lane < 16) {
      bulk_copy(slot + r * kCodePitch, static_cast<const char*>(p.w.w) + n * w_row + c0 * CB,
                code_bytes, bar, policy);
    } else {
      unsigned char* sd = slot + 16 * kCodePitch + r * bp.scale_pitch;
      bulk_copy(sd, static_cast<const char*>(p.w.scales) + n * s_row + a0, span, bar, policy);
      bulk_copy(sd + 16 * bp.scale_pitch, static_cast<const char*>(p.w.biases) + n * s_row + a0,
                span, bar, policy);
    }
  };

  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&bars[s]);
    mbar_init_fence();
  }
  __syncwarp();
  for (std::int64_t i = 0; i < kStages && i < total; ++i) issue(i);

  // The activation rows into shared memory, each 16-byte unit (8 x of one group) permuted into
  // the mma's B registers for h = 0 and h = 1: (b0, b1, b0', b1'). Rows past m are zero.
  const std::int64_t row_units = p.norm_w ? 0 : G * GW;
  if (p.norm_w) fused_norm<T, GW, GK>(p, m0, RB, mc, xs, bp.x_units, red);
  for (std::int64_t u = threadIdx.x; u < RB * row_units; u += kBulkThreads) {
    const int r = static_cast<int>(u / row_units);
    const std::int64_t grp = (u % row_units) / GW;
    const int w = static_cast<int>(u % GW);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < mc) {
      const uint4 x = *reinterpret_cast<const uint4*>(
          static_cast<const T*>(p.x) + ((m0 + r) / p.x_div) * p.x_stride + grp * GK + w * 8);
      v = make_uint4(__byte_perm(x.x, x.z, 0x5410u), __byte_perm(x.x, x.z, 0x7632u),
                     __byte_perm(x.y, x.w, 0x5410u), __byte_perm(x.y, x.w, 0x7632u));
    }
    xs[r * bp.x_units + grp * (GW + 1) + w] = v;
  }
  __syncthreads();

  // Lane (g, t) gives B column g of row pair rp: activation row 2 rp + g / 4 over group offset
  // g % 4, nonzero only when t == g % 4 (as in the gpl kernel).
  const int gx = g / 4;
  bool gives[NPB];
  const uint4* xl[NPB];  // this lane's group 4c + t of its row in pair rp: + 4c (GW + 1)
#pragma unroll
  for (int rp = 0; rp < NPB; ++rp) {
    gives[rp] = t == g % 4 && 2 * rp + gx < mc;
    xl[rp] = xs + (2 * rp + gx) * bp.x_units + t * (GW + 1);
  }
  const std::uint32_t ones[4] = {Magic<T>::kOnes, Magic<T>::kOnes, Magic<T>::kOnes,
                                 Magic<T>::kOnes};
  const int j0 = 2 * (t % 2);
  // e per (row, group): the mma of ones against each chunk's B, as the gpl kernel computes it.
  for (std::int64_t c = warp; c < chunks; c += kWarps) {
#pragma unroll
    for (int rp = 0; rp < NPB; ++rp) {
      float e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int w = 0; w < GW; ++w) {
        const uint4 xv = gives[rp] ? xl[rp][4 * c * (GW + 1) + w] : make_uint4(0, 0, 0, 0);
        mma<T>(e, ones, xv.x, xv.y);
        mma<T>(e, ones, xv.z, xv.w);
      }
      if (g == 0) {
        es[(2 * rp + t / 2) * G + 4 * c + j0] = e[0];
        es[(2 * rp + t / 2) * G + 4 * c + j0 + 1] = e[1];
      }
    }
  }
  __syncthreads();

  // + 4c: e of groups 4c + j0, 4c + j0 + 1 for this lane's D columns' row of pair rp
  const float* el = es + (t / 2) * G + j0;
  float acc[NPB][4];
#pragma unroll
  for (int rp = 0; rp < NPB; ++rp)
#pragma unroll
    for (int u = 0; u < 4; ++u) acc[rp][u] = 0.0f;
  for (std::int64_t i = 0; i < total; ++i) {
    const int j = static_cast<int>(i % ns);
    const std::int64_t c0 = c_begin + j * CPS;
    const int nc = static_cast<int>(c_end - c0 < CPS ? c_end - c0 : CPS);
    const int shift = static_cast<int>((4 * c0 * sb) & 15);
    mbar_wait(&bars[i % kStages], static_cast<std::uint32_t>((i / kStages) & 1));
    const unsigned char* slot = ring + (i % kStages) * bp.slot_bytes;
#pragma unroll
    for (int lc = 0; lc < CPS; ++lc) {
      if (lc >= nc) break;
      const std::int64_t c = c0 + lc;
      std::uint32_t ra[GW], rb[GW];
#pragma unroll
      for (int q = 0; q < WPL; ++q) {
        const uint4 va =
            reinterpret_cast<const uint4*>(slot + g * kCodePitch + (4 * lc + t) * GB)[q];
        const uint4 vb =
            reinterpret_cast<const uint4*>(slot + (g + 8) * kCodePitch + (4 * lc + t) * GB)[q];
        ra[4 * q] = va.x, ra[4 * q + 1] = va.y, ra[4 * q + 2] = va.z, ra[4 * q + 3] = va.w;
        rb[4 * q] = vb.x, rb[4 * q + 1] = vb.y, rb[4 * q + 2] = vb.z, rb[4 * q + 3] = vb.w;
      }
      // Scales and biases of rows g, g + 8 for groups 4c + j0, 4c + j0 + 1.
      const unsigned char* sa = slot + 16 * kCodePitch + g * bp.scale_pitch + shift +
                                (4 * lc + j0) * sb;
      const unsigned char* sbp = sa + 8 * bp.scale_pitch;
      const int bo = 16 * bp.scale_pitch;  // biases after the scales
      float s_a[2], b_a[2], s_b[2], b_b[2];
      if (code == 0) {
        const float2 x0 = *reinterpret_cast<const float2*>(sa);
        const float2 x1 = *reinterpret_cast<const float2*>(sa + bo);
        const float2 x2 = *reinterpret_cast<const float2*>(sbp);
        const float2 x3 = *reinterpret_cast<const float2*>(sbp + bo);
        s_a[0] = x0.x, s_a[1] = x0.y, b_a[0] = x1.x, b_a[1] = x1.y;
        s_b[0] = x2.x, s_b[1] = x2.y, b_b[0] = x3.x, b_b[1] = x3.y;
      } else {
        const std::uint32_t w0 = *reinterpret_cast<const std::uint32_t*>(sa);
        const std::uint32_t w1 = *reinterpret_cast<const std::uint32_t*>(sa + bo);
        const std::uint32_t w2 = *reinterpret_cast<const std::uint32_t*>(sbp);
        const std::uint32_t w3 = *reinterpret_cast<const std::uint32_t*>(sbp + bo);
        s_a[0] = code_value(w0, code, 0), s_a[1] = code_value(w0, code, 1);
        b_a[0] = code_value(w1, code, 0), b_a[1] = code_value(w1, code, 1);
        s_b[0] = code_value(w2, code, 0), s_b[1] = code_value(w2, code, 1);
        b_b[0] = code_value(w3, code, 0), b_b[1] = code_value(w3, code, 1);
      }
      // Each row pair: its own d over (w, h) in order, then the group's scales (the rows' D
      // columns never mix, so a row's value does not depend on its pair or block).
      float d[NPB][4];
#pragma unroll
      for (int rp = 0; rp < NPB; ++rp)
#pragma unroll
        for (int u = 0; u < 4; ++u) d[rp][u] = 0.0f;
#pragma unroll
      for (int w = 0; w < GW; ++w) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const std::uint32_t a[4] = {code_pair<T>(ra[w], 2 * h), code_pair<T>(rb[w], 2 * h),
                                      code_pair<T>(ra[w], 2 * h + 1),
                                      code_pair<T>(rb[w], 2 * h + 1)};
#pragma unroll
          for (int rp = 0; rp < NPB; ++rp) {
            const uint4 xv =
                gives[rp] ? xl[rp][4 * c * (GW + 1) + w] : make_uint4(0, 0, 0, 0);
            mma<T>(d[rp], a, h ? xv.z : xv.x, h ? xv.w : xv.y);
          }
        }
      }
#pragma unroll
      for (int rp = 0; rp < NPB; ++rp) {
        const float2 ev = *reinterpret_cast<const float2*>(el + 2 * rp * G + 4 * c);
        const float e[2] = {ev.x, ev.y};
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          acc[rp][u] = fmaf(s_a[u], d[rp][u],
                            fmaf(b_a[u] - Magic<T>::kOff * s_a[u], e[u], acc[rp][u]));
          acc[rp][2 + u] = fmaf(s_b[u], d[rp][2 + u],
                                fmaf(b_b[u] - Magic<T>::kOff * s_b[u], e[u], acc[rp][2 + u]));
        }
      }
    }
    // The slot is read: refill it with the stage kStages ahead.
    __syncwarp();
    fence_proxy_async();
    if (i + kStages < total) issue(i + kStages);
    if (j != ns - 1) continue;

    // The column block is done: K slices add up in warp order, as in the gpl kernel.
    fold_groups<NPB>(acc, red, warp, lane);
    __syncthreads();
    if (kw == 0 && t % 2 == 0) {
      if (gated)
        sum_slices_gated<T, NPB>(p, mp.ks, red, warp, lane, tile_of(i), m0, mc, half);
      else
        sum_slices_store<T, NPB>(p, mp.ks, red, warp, lane, kTileCols * tile_of(i), m0, mc,
                                 n_last);
    }
    __syncthreads();
#pragma unroll
    for (int rp = 0; rp < NPB; ++rp)
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[rp][u] = 0.0f;
  }
#else
  (void)bp;
  __trap();  // the host launches this on sm_90+ only
#endif
}

struct DeviceFacts {
  int cc_major = -1, sms = 0, smem_optin = 0;
};
const DeviceFacts& facts(int device) {
  static DeviceFacts cached[64];
  static bool known[64] = {};
  static const DeviceFacts none;
  if (device < 0 || device >= 64) return none;
  if (!known[device]) {
    gpuDeviceProp_t prop;
    if (gpuGetDeviceProperties(&prop, device) == gpuSuccess) {
      cached[device].cc_major = prop.major;
      cached[device].sms = prop.multiProcessorCount;
      cached[device].smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
    }
    known[device] = true;
  }
  return cached[device];
}

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15) == 0; }
int round_up(std::int64_t v, int to) { return static_cast<int>((v + to - 1) / to * to); }

template <typename T, int WPL, int kStages, int NPB>
bool launch_bulk(const MmaParams& mp, const Stream& s) {
  constexpr int GW = 4 * WPL, CPS = kRowBytes / (16 * WPL * 4);
  const LinParams& p = mp.p;
  const DeviceFacts& f = facts(s.device());
  const int sb = p.w.scales_code == 0 ? 4 : 2;
  const std::int64_t G = mp.groups;
  BulkParams bp;
  bp.mp = mp;
  bp.mp.col_block0 = 0;
  const std::int64_t tiles = (p.w.n + kTileCols - 1) / kTileCols;
  const int tiles_per_block = kWarps / mp.ks;
  bp.col_blocks = (tiles + tiles_per_block - 1) / tiles_per_block;
  bp.scale_pitch = round_up(4 * CPS * sb + 16, 16);
  bp.slot_bytes = 16 * kCodePitch + 32 * bp.scale_pitch;
  const std::int64_t units = G * (GW + 1);
  bp.x_units = static_cast<int>(units + ((4 - units % 8) + 8) % 8);  // = 4 (mod 8): rows apart
  bp.e_offset = kRedOffset + kRedBytes;
  bp.x_offset = round_up(bp.e_offset + 2 * NPB * G * 4, 128);
  bp.ring_offset =
      round_up(bp.x_offset + 2 * NPB * static_cast<std::int64_t>(bp.x_units) * 16, 128);
  const std::int64_t bytes =
      bp.ring_offset + static_cast<std::int64_t>(kWarps) * kStages * bp.slot_bytes;
  static_assert(kBarBytes <= kRedOffset, "barriers overlap the reduction buffer");
  if (bytes > f.smem_optin) return false;
  auto kernel = qgemv_bulk_kernel<T, WPL, kStages, NPB>;
  static int set_for = -1;  // the opt-in size, once per instantiation (not while recording)
  if (set_for != f.smem_optin) {
    GPU_CHECK(gpuFuncSetMaxDynamicSmem(kernel, f.smem_optin), "linear (bulk qgemv)", s.device());
    set_for = f.smem_optin;
  }
  const dim3 grid(static_cast<unsigned>(std::min<std::int64_t>(bp.col_blocks, f.sms)),
                  blocks_for(p.m, 2 * NPB));
  kernel<<<grid, kBulkThreads, static_cast<std::size_t>(bytes),
           static_cast<gpuStream_t>(s.handle())>>>(bp);
  return true;
}

}  // namespace

template <typename T>
bool qgemv_bulk(const MmaParams& mp, const Stream& s) {
  // Off by default until a GPU run has checked and measured it (written without a device).
  static const bool on = env_int("MLXCEL_GPU_QGEMV_BULK", 0) != 0;
  const LinParams& p = mp.p;
  if (!on || p.experts || p.m < 1 || p.m > 64) return false;
  if (facts(s.device()).cc_major < 9) return false;
  const int gs = p.w.group_size, sb = p.w.scales_code == 0 ? 4 : 2;
  const std::int64_t G = mp.groups;
  // Whole chunks only, 16-byte aligned scale rows, and 16-byte aligned operands for the copies.
  if ((gs != 32 && gs != 64) || G % 4 != 0 || (G * sb) % 16 != 0 || !p.w.biases ||
      !aligned16(p.w.w) || !aligned16(p.w.scales) || !aligned16(p.w.biases) || !aligned16(p.x) ||
      (p.x_stride * static_cast<std::int64_t>(sizeof(T))) % 16 != 0 ||
      (p.norm_w && (p.x_div != 1 || !p.norm_src)) ||
      (p.gated_out && (p.w.n % 16 != 0 || p.accumulate)))
    return false;
  // Stages per warp: MLXCEL_GPU_QGEMV_BULK_STAGES = 2, 3 (default) or 4, fewer where the
  // shared memory does not fit them (a measuring knob; the arithmetic is the same for all).
  static const int want = [] {
    const int v = env_int("MLXCEL_GPU_QGEMV_BULK_STAGES", 3);
    return v >= 2 && v <= kMaxStages ? v : 3;
  }();
  // Rows: 1-2 in one block row; more in blocks of 8 that each reuse a stage for 4 row pairs
  // (false where that does not fit: the gpl kernel's 4-row blocks take the rows, same bits).
  auto with_wpl = [&](auto wpl) {
    constexpr int W = decltype(wpl)::value;
    if (p.m <= 2) {
      if (want >= 4 && launch_bulk<T, W, 4, 1>(mp, s)) return true;
      if (want >= 3 && launch_bulk<T, W, 3, 1>(mp, s)) return true;
      return launch_bulk<T, W, 2, 1>(mp, s);
    }
    if (want >= 3 && launch_bulk<T, W, 3, kMaxNpb>(mp, s)) return true;
    return launch_bulk<T, W, 2, kMaxNpb>(mp, s);
  };
  return gs == 32 ? with_wpl(std::integral_constant<int, 1>{})
                  : with_wpl(std::integral_constant<int, 2>{});
}

template bool qgemv_bulk<bf16>(const MmaParams&, const Stream&);
template bool qgemv_bulk<f16>(const MmaParams&, const Stream&);

}  // namespace mlxcel::gpu::qmma
#endif  // MLXCEL_GPU_CUDA
