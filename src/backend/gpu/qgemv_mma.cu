// Decode GEMV over MLX affine 4-bit weights on the tensor cores (mma.sync m16n8k16, CUDA sm_80+).
//
// Why: the SIMT qgemv (linear.cu) spends ~5.5 instructions per weight turning codes into floats
// and multiplying them, so a block's compute phase is as long as its memory round trip and the
// 8B's GEMVs reached ~1.1 TB/s of the H200's 4.2 (dev/NOTES.md, session 7). Here a warp computes a
// 16-column tile with the weights as the mma's A operand (rows = output columns) and activation
// rows in B, so decoding is one shift and one LOP3 per two weights and the multiply-adds are one
// instruction per 256 weights (8B decode 168 -> 236 tok/s, runs 18-22).
//
// Exactness: codes c (0..15) are placed into bf16 / f16 pairs as (off + c) by OR-ing them into the
// mantissa of `off` (128 for bf16, 1024 for f16), both exact; the tensor core multiplies them by
// x exactly and accumulates in fp32. Per group (fresh accumulators) the unit factors as
//   sum (s c + b) x = s * sum (off + c) x + (b - off s) * sum x,
// and sum x comes from a second mma with A = ones. So the math is the SIMT kernel's
// (s * sum c x + b * sum x, fp32) with another summation order.
//
// K order: a dot product does not care in which order k runs, as long as A and B agree. Each code
// word of 8 weights gives the pairs (c0, c4), (c1, c5), (c2, c6), (c3, c7), and the x pairs are
// permuted to match with two PRMT per mma. Two kernels place the groups differently:
//  - qgemv_mma_gpl_kernel (group sizes 32 / 64, an even group count; the default): lane t of a
//    quad holds whole groups and the mma's N separates them (one column per row and group);
//  - qgemv_mma_kernel (group size 128, odd group counts, or MLXCEL_GPU_QGEMV_MMA_GPL=0): lane t
//    holds gs / 4 weights of each group, so each mma's 16 k lie in one group, and the N columns
//    are 8 activation rows (faster above a few rows: run 21-22's batch 16, 1,473 against 1,108
//    tok/s; slower at one row, 194 against 236).
//
// Batch invariance: an output (row, column) is its own dot product in the mma, and the group
// loop and the K split depend on the matrix only, so a row's result is the same alone or among
// 64 rows (which kernel runs depends on the matrix and the process's switch, never the batch).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "backend/gpu/linear.cuh"
#include "backend/gpu/mma.cuh"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {

#if defined(MLXCEL_GPU_CUDA)
namespace {

constexpr int kWarps = 8;  // warps per block
constexpr int kThreads = kWarps * MLXCEL_WARP_SIZE;
constexpr int kRows = 8;                     // activation rows per block: the mma's N
constexpr int kTileCols = 16;                // output columns per warp: the mma's M
constexpr std::int64_t kTargetWarps = 2048;  // ~16 warps per SM on a 132-SM H200

struct MmaParams {
  LinParams p;
  int ks = 1;                   // warps per column tile, splitting the groups of K
  std::int64_t groups = 0;      // groups per row: k / group_size
  std::int64_t col_block0 = 0;  // the first column block of this launch
  std::int64_t pair_blocks = 0;  // Pair: column blocks of the first matrix (p.pair_*: the second)
};

// The bf16 / f16 pair (off, off) and its offset: OR-ing a 4-bit code into each half's low
// mantissa bits reads as off + c, exactly.
template <typename T>
struct Magic;
template <>
struct Magic<bf16> {
  static constexpr std::uint32_t kPair = 0x43004300u;  // (128, 128)
  static constexpr std::uint32_t kOnes = 0x3F803F80u;  // (1, 1)
  static constexpr float kOff = 128.0f;
};
template <>
struct Magic<f16> {
  static constexpr std::uint32_t kPair = 0x64006400u;  // (1024, 1024)
  static constexpr std::uint32_t kOnes = 0x3C003C00u;  // (1, 1)
  static constexpr float kOff = 1024.0f;
};

// Codes i and i + 4 of a packed word as the pair (off + c_i, off + c_{i+4}).
template <typename T>
__device__ __forceinline__ std::uint32_t code_pair(std::uint32_t w, int i) {
  return ((w >> (4 * i)) & 0x000F000Fu) | Magic<T>::kPair;
}

// `n` 32-bit words from 4 * n aligned bytes in one load (n = 1, 2 or 4).
template <int N>
__device__ __forceinline__ void load_words(const std::uint32_t* p, std::uint32_t (&w)[N]) {
  if constexpr (N == 4) {
    const uint4 v = *reinterpret_cast<const uint4*>(p);
    w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
  } else if constexpr (N == 2) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x, w[1] = v.y;
  } else {
    w[0] = *p;
  }
}

// One group's registers for a lane: the code words of rows g and g + 8 (WPL words each: the
// lane's gs / 4 weights), its x values at the same k (8 per word), the two rows' scale and bias.
template <int WPL>
struct GroupRegs {
  std::uint32_t wa[WPL], wb[WPL];
  uint4 x[WPL];
  float sa, ba, sb, bb;
};

// acc += one group of a lane's 16 x 8 tile: 2 * WPL mma steps over the codes (fresh
// accumulators d) and over ones (e = the group's sum of x per row), then the group's scales.
template <typename T, int WPL>
__device__ __forceinline__ void apply_group_regs(const GroupRegs<WPL>& r, float (&acc)[4]) {
  float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const std::uint32_t ones[4] = {Magic<T>::kOnes, Magic<T>::kOnes, Magic<T>::kOnes,
                                 Magic<T>::kOnes};
#pragma unroll
  for (int i = 0; i < WPL; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // k slots (2t, 2t + 1, 2t + 8, 2t + 9) of this mma hold codes (2h, 2h + 4, 2h + 1,
      // 2h + 5) of word i, and x at the same k.
      const std::uint32_t a[4] = {code_pair<T>(r.wa[i], 2 * h), code_pair<T>(r.wb[i], 2 * h),
                                  code_pair<T>(r.wa[i], 2 * h + 1),
                                  code_pair<T>(r.wb[i], 2 * h + 1)};
      const std::uint32_t lo = h ? r.x[i].y : r.x[i].x, hi = h ? r.x[i].w : r.x[i].z;
      const std::uint32_t b0 = __byte_perm(lo, hi, 0x5410u), b1 = __byte_perm(lo, hi, 0x7632u);
      mma<T>(d, a, b0, b1);
      mma<T>(e, ones, b0, b1);
    }
  }
  // d: (col g, row 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1); e: sum x of rows 2t, 2t + 1.
  const float oa = r.ba - Magic<T>::kOff * r.sa, ob = r.bb - Magic<T>::kOff * r.sb;
  acc[0] = fmaf(r.sa, d[0], fmaf(oa, e[0], acc[0]));
  acc[1] = fmaf(r.sa, d[1], fmaf(oa, e[1], acc[1]));
  acc[2] = fmaf(r.sb, d[2], fmaf(ob, e[2], acc[2]));
  acc[3] = fmaf(r.sb, d[3], fmaf(ob, e[3], acc[3]));
}

// A lane's part of the launch: its warp's column tile and K slice, its two weight rows (g and
// g + 8 of the tile) and its activation row (g of the block's rows).
template <typename T, int WPL>
struct LaneWork {
  int warp, lane, g, t, kw, mc;
  std::int64_t n0, m0, n_last, G, na, nb, q_begin, q_end;
  WPtrs wp;
  const std::uint32_t* wa;  // row na's words of this lane in group 0
  const std::uint32_t* wb;
  const T* xr;  // the x values of this lane in group 0
  bool has_x;

  static constexpr int kGroupWords = 4 * WPL;  // a group's words per row
  static constexpr int kGroupK = 32 * WPL;     // group size

  __device__ __forceinline__ explicit LaneWork(const MmaParams& mp) {
    const LinParams& p = mp.p;
    warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
    g = lane / 4, t = lane % 4;
    const int tile = warp / mp.ks;
    kw = warp % mp.ks;
    const std::int64_t cb = mp.col_block0 + static_cast<std::int64_t>(blockIdx.y);
    n0 = (cb * (kWarps / mp.ks) + tile) * kTileCols;
    const int per_block = p.experts ? 1 : kRows;
    m0 = static_cast<std::int64_t>(blockIdx.x) * per_block;
    mc = static_cast<int>(p.m - m0 < per_block ? p.m - m0 : per_block);
    wp = wptrs(p, m0);
    n_last = p.w.n - 1, G = mp.groups;
    // Rows past N read the last row (their results are not stored).
    na = n0 + g < n_last ? n0 + g : n_last;
    nb = n0 + g + 8 < n_last ? n0 + g + 8 : n_last;
    const std::int64_t row_words = p.w.k / 8;
    wa = static_cast<const std::uint32_t*>(wp.w) + na * row_words + t * WPL;
    wb = static_cast<const std::uint32_t*>(wp.w) + nb * row_words + t * WPL;
    // Lane g feeds activation row m0 + g; lanes past the block's rows feed zeros.
    has_x = g < mc;
    xr = static_cast<const T*>(p.x) + ((m0 + (has_x ? g : 0)) / p.x_div) * p.x_stride + t * WPL * 8;
    q_begin = G * kw / mp.ks, q_end = G * (kw + 1) / mp.ks;
  }

  __device__ __forceinline__ void load_x(uint4 (&x)[WPL], std::int64_t q) const {
#pragma unroll
    for (int i = 0; i < WPL; ++i)
      x[i] = has_x ? reinterpret_cast<const uint4*>(xr + q * kGroupK)[i] : make_uint4(0, 0, 0, 0);
  }

  // The tile's K slices add up in warp order; warp kw == 0 of the tile stores (red: kWarps x 4 x
  // 32 floats of shared memory).
  __device__ __forceinline__ void finish(const MmaParams& mp, const float (&acc)[4],
                                         float* red) const {
    const LinParams& p = mp.p;
#pragma unroll
    for (int i = 0; i < 4; ++i) red[(warp * 4 + i) * MLXCEL_WARP_SIZE + lane] = acc[i];
    __syncthreads();
    if (kw != 0) return;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = red[(warp * 4 + i) * MLXCEL_WARP_SIZE + lane];
      for (int w = 1; w < mp.ks; ++w) s += red[((warp + w) * 4 + i) * MLXCEL_WARP_SIZE + lane];
      const int row = 2 * t + (i & 1);
      const std::int64_t n = n0 + g + 8 * (i >> 1);
      if (row < mc && n <= n_last)
        store_lin<T>(p, (m0 + row) * p.y_stride + n, n, s);
    }
  }
};

// grid (row blocks, column blocks), kThreads threads; U groups loaded into registers before any
// is used (run 18: U = 1 / 2 / 4 gave 189 / 195 / 190 tok/s on the 8B).
template <typename T, int WPL, int U = 2>
__global__ void __launch_bounds__(kThreads) qgemv_mma_kernel(MmaParams mp) {
  wait_previous_kernel();
  __shared__ float red[kWarps * 4 * MLXCEL_WARP_SIZE];
  const LaneWork<T, WPL> lw(mp);
  const int code = mp.p.w.scales_code, step = mp.p.w.scale_step;
  auto load_group = [&](GroupRegs<WPL>& r, std::int64_t q) {
    load_words<WPL>(lw.wa + q * lw.kGroupWords, r.wa);
    load_words<WPL>(lw.wb + q * lw.kGroupWords, r.wb);
    lw.load_x(r.x, q);
    r.sa = load_code(lw.wp.scales, code, (lw.na * lw.G + q) * step);
    r.ba = load_code(lw.wp.biases, code, (lw.na * lw.G + q) * step);
    r.sb = load_code(lw.wp.scales, code, (lw.nb * lw.G + q) * step);
    r.bb = load_code(lw.wp.biases, code, (lw.nb * lw.G + q) * step);
  };
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  std::int64_t q = lw.q_begin;
  for (; q + U <= lw.q_end; q += U) {
    GroupRegs<WPL> r[U];
#pragma unroll
    for (int j = 0; j < U; ++j) load_group(r[j], q + j);
#pragma unroll
    for (int j = 0; j < U; ++j) apply_group_regs<T, WPL>(r[j], acc);
  }
  for (; q < lw.q_end; ++q) {
    GroupRegs<WPL> r;
    load_group(r, q);
    apply_group_regs<T, WPL>(r, acc);
  }
  lw.finish(mp, acc, red);
}

// Element i (0 or 1) of a 4-byte word of two 16-bit scale codes (code 1: bf16, 2: f16).
__device__ __forceinline__ float code_value(std::uint32_t word, int code, std::int64_t i) {
  if (code == 0) return __uint_as_float(word);
  const std::uint32_t h = (i & 1) ? word >> 16 : word & 0xFFFFu;
  return code == 1 ? __uint_as_float(h << 16)
                   : f16::from_bits(static_cast<std::uint16_t>(h)).to_float();
}

// --- One group per lane ----------------------------------------------------------------------
// Lane t of a quad holds a whole group of its two rows (group 4c + t of chunk c: 16 or 32
// contiguous bytes per row, so a quad reads 64 or 128 contiguous bytes of a row) and the mma's N
// separates the groups instead of summing them: column 4r + j is activation row r restricted to
// the k of group 4c + j (only lanes t == j give it nonzero x). So each column of D is one
// (row, group) dot product, folded with that group's scale and bias, and per lane the scales of
// two adjacent groups are one 4-byte word. Per output the sum runs: each group inside the mma,
// groups 4c + j over the chunks c in order (j = 0..3 in four accumulators), then
// (j0 + j1) + (j2 + j3), then the K slices in warp order: fixed by the matrix, never the batch.
// NP mma column sets of 2 rows each (1 for 1-2 rows and expert-indexed rows, else 2).
template <int GW>
struct ChunkLoad {
  std::uint32_t ra[GW], rb[GW];  // code words of rows na, nb
  // Scale / bias words of rows na, nb. Two arrays: 16-bit (scale, scale) / (bias, bias) pairs of
  // groups (j0, j0 + 1) in 0-3 (sa, ba, sb, bb), f32 in 0-7 (group j0 in 0-3, j0 + 1 in 4-7).
  // Paired (PS): 16-bit (scale, bias) words of groups j0, j0 + 1 of row na in 0-1, nb in 2-3;
  // f32 s, b, s, b of row na in 0-3, nb in 4-7.
  std::uint32_t sw[8];
  uint4 x[GW];  // XP: this lane's x words of the chunk (zero where it gives none)
};

// Instruction count (session 21, dev/NOTES.md): the loop is one LOP3 and a shift per code pair
// (the magic in a register: the compiler otherwise splits mask and OR into two LOP3), 32-bit
// group indices off row bases fixed before the loop, the scale decode inline where the scales
// are the activation dtype (NS, as MLX stores them), and two register sets alternating instead
// of a copy of the prefetched chunk: 255 instructions per chunk of 32 mma where the first form
// had 462 (run 41, H100: 8B +3 %, 0.6B +7 %, 30B +8 %, the same bits).

// (w >> 4i) & 0x000F000F | magic as one LOP3 with the magic in a register.
__device__ __forceinline__ std::uint32_t code_pair_lop3(std::uint32_t w, int i,
                                                        std::uint32_t magic) {
  std::uint32_t r;
  asm("lop3.b32 %0, %1, 0x000F000F, %2, 0xEA;" : "=r"(r) : "r"(w >> (4 * i)), "r"(magic));
  return r;
}

// A scale or bias word's element u (0 / 1) as f32: 16-bit codes of T (NS), else by code.
template <typename T, bool NS>
__device__ __forceinline__ float scale_at(std::uint32_t lo, std::uint32_t hi, int code, int u) {
  if constexpr (NS) {
    if constexpr (std::is_same_v<T, bf16>)
      return __uint_as_float(u ? lo & 0xFFFF0000u : lo << 16);
    else
      return f16::from_bits(static_cast<std::uint16_t>(u ? lo >> 16 : lo & 0xFFFFu)).to_float();
  } else {
    return code == 0 ? __uint_as_float(u ? hi : lo) : code_value(lo, code, u);
  }
}

// PS: the (scale, bias) of group j0 + u of row r (0: na, 1: nb) from a chunk's paired words.
template <typename T, bool NS>
__device__ __forceinline__ void paired_at(const std::uint32_t (&sw)[8], int code, int r, int u,
                                          float& s, float& b) {
  if (!NS && code == 0) {
    s = __uint_as_float(sw[4 * r + 2 * u]);
    b = __uint_as_float(sw[4 * r + 2 * u + 1]);
  } else {
    s = scale_at<T, NS>(sw[2 * r + u], 0u, code, 0);
    b = scale_at<T, NS>(sw[2 * r + u], 0u, code, 1);
  }
}

// PS (paired scales, backend::Matrix::scale_step 2): a row's (scale, bias) of the lane's two
// groups are one 8-byte (16-byte for f32) load instead of four 4-byte (8-byte) ones; the
// arithmetic is the same, so are the bits. Run 43's access bench put ~6 us of the 8B gate_up's
// ~39 on the four scale loads (L1 wavefronts, each touching 8 rows' lines).
// XP (with PF): x's words of chunk c + 1 load with its codes, a chunk ahead, instead of inside
// chunk c + 1's math (run 44's access bench: gate_up -10 %); x is the previous kernel's output,
// so the first chunk's x loads only after the grid wait. Same arithmetic, same bits.
// PF (one column set): chunk c + 1 loads into registers while chunk c is computed; only the
// load timing differs, so the bits are the same. Not with two sets, where it takes too many
// registers (batch 16: 1,245 -> 785 tok/s, run 27).
// Pair (expert rows, one column set): column blocks from mp.pair_blocks on are the second
// matrix's (p.pair_*), the same columns of the same rows, so a MoE step's gate and up products
// are one launch (their fixed costs paid once). Each output's arithmetic is that of the
// unpaired launch: same matrix shape, same K split.
template <typename T, int WPL, int NP, bool Pair, bool NS, bool PS, bool XP>
__global__ void __launch_bounds__(kThreads) qgemv_mma_gpl_kernel(MmaParams mp) {
  constexpr bool PF = NP == 1;
  static_assert(!XP || PF, "x loads a chunk ahead only with the prefetching form");
  __shared__ float red[kWarps * 4 * NP * MLXCEL_WARP_SIZE];
  const LinParams& p = mp.p;
  constexpr int GW = 4 * WPL;  // words (and x uint4) of one group row
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
  const int g = lane / 4, t = lane % 4;
  const int tile = warp / mp.ks, kw = warp % mp.ks;
  std::int64_t cb = mp.col_block0 + static_cast<std::int64_t>(blockIdx.y);
  bool second = false;
  if constexpr (Pair) {
    second = cb >= mp.pair_blocks;
    if (second) cb -= mp.pair_blocks;
  }
  const std::int64_t n0 = (cb * (kWarps / mp.ks) + tile) * kTileCols;
  const int per_block = p.experts ? 1 : 2 * NP;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.x) * per_block;
  const int mc = static_cast<int>(p.m - m0 < per_block ? p.m - m0 : per_block);
  if (p.experts) gpu_grid_wait();  // expert ids are the previous kernel's output
  WPtrs wp = wptrs(p, m0);
  T* y = static_cast<T*>(p.y);
  if constexpr (Pair) {
    if (second) {
      WView v = p.w;
      v.w = p.pair_w, v.scales = p.pair_scales, v.biases = p.pair_biases;
      wp = expert_wptrs(v, p.experts[m0]);
      y = static_cast<T*>(p.pair_y);
    }
  }
  const std::int64_t n_last = p.w.n - 1;
  const int G = static_cast<int>(mp.groups);
  const std::int64_t na = n0 + g < n_last ? n0 + g : n_last;
  const std::int64_t nb = n0 + g + 8 < n_last ? n0 + g + 8 : n_last;
  const std::int64_t row_words = p.w.k / 8;
  // Row bases: codes in uint4 (a group row is WPL of them), scales and biases in pairs of
  // elements (4 or 8 bytes: G is even, so a lane's two groups are one aligned pair); paired,
  // a row's G (scale, bias) pairs start at sa / sb (ba, bb unused).
  const uint4* wa = reinterpret_cast<const uint4*>(static_cast<const std::uint32_t*>(wp.w) +
                                                   na * row_words);
  const uint4* wb = reinterpret_cast<const uint4*>(static_cast<const std::uint32_t*>(wp.w) +
                                                   nb * row_words);
  const int code = NS ? (std::is_same_v<T, bf16> ? 1 : 2) : p.w.scales_code;
  const int es = code == 0 ? 4 : 2;  // bytes per scale
  constexpr int kStep = PS ? 2 : 1;
  const char* sa = static_cast<const char*>(wp.scales) + na * G * es * kStep;
  const char* ba = static_cast<const char*>(wp.biases) + na * G * es;
  const char* sb = static_cast<const char*>(wp.scales) + nb * G * es * kStep;
  const char* bb = static_cast<const char*>(wp.biases) + nb * G * es;
  // B column g of column set q: row 2 q + g / 4 over group offset g % 4; lane (g, t) gives it
  // nonzero x only when t == g % 4.
  const uint4* xrow[NP];
  bool gives[NP];
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    const int r = 2 * q + g / 4;
    gives[q] = t == g % 4 && r < mc;
    xrow[q] = reinterpret_cast<const uint4*>(static_cast<const T*>(p.x) +
                                             ((m0 + (gives[q] ? r : 0)) / p.x_div) * p.x_stride);
  }
  const std::uint32_t magic = Magic<T>::kPair;
  const int j0 = 2 * (t % 2);  // this lane's D columns 2t, 2t + 1: group offsets j0, j0 + 1
  const int chunks = (G + 3) / 4;
  const int c_begin = chunks * kw / mp.ks, c_end = chunks * (kw + 1) / mp.ks;
  float acc[NP][4];
#pragma unroll
  for (int q = 0; q < NP; ++q)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[q][i] = 0.0f;
  const std::uint32_t ones[4] = {Magic<T>::kOnes, Magic<T>::kOnes, Magic<T>::kOnes,
                                 Magic<T>::kOnes};
  // Chunk c: this lane's group 4c + t of rows na, nb (the last group past G: its B is zero),
  // and the scale / bias pairs of groups 4c + j0, +1 (clamped to the last pair).
  auto load_chunk = [&](int c, ChunkLoad<GW>& l) {
    const int gl = min(4 * c + t, G - 1);
#pragma unroll
    for (int i = 0; i < WPL; ++i) {
      const uint4 va = wa[gl * WPL + i], vb = wb[gl * WPL + i];
      l.ra[4 * i] = va.x, l.ra[4 * i + 1] = va.y, l.ra[4 * i + 2] = va.z, l.ra[4 * i + 3] = va.w;
      l.rb[4 * i] = vb.x, l.rb[4 * i + 1] = vb.y, l.rb[4 * i + 2] = vb.z, l.rb[4 * i + 3] = vb.w;
    }
    const int sp = min(2 * c + (t % 2), G / 2 - 1);  // the pair's index
    if constexpr (PS) {
      if (!NS && code == 0) {
        const uint4 x0 = reinterpret_cast<const uint4*>(sa)[sp];
        const uint4 x1 = reinterpret_cast<const uint4*>(sb)[sp];
        l.sw[0] = x0.x, l.sw[1] = x0.y, l.sw[2] = x0.z, l.sw[3] = x0.w;
        l.sw[4] = x1.x, l.sw[5] = x1.y, l.sw[6] = x1.z, l.sw[7] = x1.w;
      } else {
        const uint2 x0 = reinterpret_cast<const uint2*>(sa)[sp];
        const uint2 x1 = reinterpret_cast<const uint2*>(sb)[sp];
        l.sw[0] = x0.x, l.sw[1] = x0.y, l.sw[2] = x1.x, l.sw[3] = x1.y;
      }
    } else if (code == 0) {
      const uint2 x0 = reinterpret_cast<const uint2*>(sa)[sp];
      const uint2 x1 = reinterpret_cast<const uint2*>(ba)[sp];
      const uint2 x2 = reinterpret_cast<const uint2*>(sb)[sp];
      const uint2 x3 = reinterpret_cast<const uint2*>(bb)[sp];
      l.sw[0] = x0.x, l.sw[1] = x1.x, l.sw[2] = x2.x, l.sw[3] = x3.x;
      l.sw[4] = x0.y, l.sw[5] = x1.y, l.sw[6] = x2.y, l.sw[7] = x3.y;
    } else {
      l.sw[0] = reinterpret_cast<const std::uint32_t*>(sa)[sp];
      l.sw[1] = reinterpret_cast<const std::uint32_t*>(ba)[sp];
      l.sw[2] = reinterpret_cast<const std::uint32_t*>(sb)[sp];
      l.sw[3] = reinterpret_cast<const std::uint32_t*>(bb)[sp];
    }
  };
  // XP: chunk c's x words (lane t's group 4c + t of its one row; zero past G or where it gives
  // none).
  auto load_x = [&](int c, ChunkLoad<GW>& l) {
    const int grp = 4 * c + t;
    const bool on = gives[0] && grp < G;
#pragma unroll
    for (int w = 0; w < GW; ++w) l.x[w] = on ? xrow[0][grp * GW + w] : make_uint4(0, 0, 0, 0);
  };
  auto apply_chunk = [&](int c, const ChunkLoad<GW>& l) {
    const int grp = 4 * c + t;  // this lane's group
    const bool valid = grp < G;
    float s_a[2], b_a[2], s_b[2], b_b[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if constexpr (PS) {
        paired_at<T, NS>(l.sw, code, 0, u, s_a[u], b_a[u]);
        paired_at<T, NS>(l.sw, code, 1, u, s_b[u], b_b[u]);
      } else {
        s_a[u] = scale_at<T, NS>(l.sw[0], l.sw[4], code, u);
        b_a[u] = scale_at<T, NS>(l.sw[1], l.sw[5], code, u);
        s_b[u] = scale_at<T, NS>(l.sw[2], l.sw[6], code, u);
        b_b[u] = scale_at<T, NS>(l.sw[3], l.sw[7], code, u);
      }
    }
    float d[NP][4], e[NP][4];
#pragma unroll
    for (int q = 0; q < NP; ++q)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[q][i] = e[q][i] = 0.0f;
#pragma unroll
    for (int w = 0; w < GW; ++w) {
      uint4 xv[NP];
#pragma unroll
      for (int q = 0; q < NP; ++q) {
        if constexpr (XP)
          xv[q] = l.x[w];
        else
          xv[q] = gives[q] && valid ? xrow[q][grp * GW + w] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const std::uint32_t a[4] = {code_pair_lop3(l.ra[w], 2 * h, magic),
                                    code_pair_lop3(l.rb[w], 2 * h, magic),
                                    code_pair_lop3(l.ra[w], 2 * h + 1, magic),
                                    code_pair_lop3(l.rb[w], 2 * h + 1, magic)};
#pragma unroll
        for (int q = 0; q < NP; ++q) {
          const std::uint32_t lo = h ? xv[q].y : xv[q].x, hi = h ? xv[q].w : xv[q].z;
          const std::uint32_t b0 = __byte_perm(lo, hi, 0x5410u), b1 = __byte_perm(lo, hi, 0x7632u);
          mma<T>(d[q], a, b0, b1);
          mma<T>(e[q], ones, b0, b1);
        }
      }
    }
    // d[q]: (row g, col 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1); col 2t + u is group
    // 4c + j0 + u; e[q][u] its sum of x (all rows alike).
#pragma unroll
    for (int q = 0; q < NP; ++q)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        acc[q][u] =
            fmaf(s_a[u], d[q][u], fmaf(b_a[u] - Magic<T>::kOff * s_a[u], e[q][u], acc[q][u]));
        acc[q][2 + u] = fmaf(s_b[u], d[q][2 + u],
                             fmaf(b_b[u] - Magic<T>::kOff * s_b[u], e[q][u], acc[q][2 + u]));
      }
  };
  if constexpr (PF) {
    // Two register sets alternate: chunk c + 1 loads while chunk c is computed (past the
    // slice's end, a reload of its last chunk: no branch, an L1 hit).
    ChunkLoad<GW> l0, l1;
    if (c_begin < c_end) load_chunk(c_begin, l0);
    if (!p.experts) gpu_grid_wait();
    gpu_grid_release();
    if constexpr (XP) {
      if (c_begin < c_end) load_x(c_begin, l0);
    }
    int c = c_begin;
    for (; c + 1 < c_end; c += 2) {
      load_chunk(c + 1, l1);
      if constexpr (XP) load_x(c + 1, l1);
      apply_chunk(c, l0);
      const int next = c + 2 < c_end ? c + 2 : c + 1;
      load_chunk(next, l0);
      if constexpr (XP) load_x(next, l0);
      apply_chunk(c + 1, l1);
    }
    if (c < c_end) apply_chunk(c, l0);
  } else {
    if (!p.experts) gpu_grid_wait();
    gpu_grid_release();
    for (int c = c_begin; c < c_end; ++c) {
      ChunkLoad<GW> cur;
      load_chunk(c, cur);
      apply_chunk(c, cur);
    }
  }
  // Per row: (j0 + j1) of the even lane t, then + (j2 + j3) of its odd partner; then the K
  // slices in warp order.
#pragma unroll
  for (int q = 0; q < NP; ++q)
#pragma unroll
    for (int r2 = 0; r2 < 2; ++r2) {
      const float own = acc[q][2 * r2] + acc[q][2 * r2 + 1];
      const float other = gpu_shfl_xor(own, 1);
      const float v = (t % 2 == 0) ? own + other : other + own;
      red[((warp * NP + q) * 2 + r2) * MLXCEL_WARP_SIZE + lane] = v;
    }
  __syncthreads();
  if (kw == 0 && t % 2 == 0) {
#pragma unroll
    for (int q = 0; q < NP; ++q)
#pragma unroll
      for (int r2 = 0; r2 < 2; ++r2) {
        float v = red[((warp * NP + q) * 2 + r2) * MLXCEL_WARP_SIZE + lane];
        for (int w = 1; w < mp.ks; ++w)
          v += red[(((warp + w) * NP + q) * 2 + r2) * MLXCEL_WARP_SIZE + lane];
        const int row = 2 * q + t / 2;
        const std::int64_t n = n0 + g + 8 * r2;
        if (row < mc && n <= n_last)
          store_lin_to<T>(y, p, (m0 + row) * p.y_stride + n, n, v);
      }
  }
}

// Warps per column tile: the fewest that give kTargetWarps warps in all, keeping >= 2 groups per
// warp. Depends on the matrix only (batch invariance). MLXCEL_GPU_QGEMV_MMA_KS = 1, 2, 4 or 8
// forces one (a measuring knob).
int choose_ks(std::int64_t tiles, std::int64_t groups) {
  static const int forced = [] {
    const int k = env_int("MLXCEL_GPU_QGEMV_MMA_KS", 0);
    return k == 1 || k == 2 || k == 4 || k == 8 ? k : 0;
  }();
  if (forced) return forced;
  int ks = 1;
  // MLXCEL_GPU_QGEMV_TARGET_WARPS: another target (a measuring knob; per process, so batch
  // invariance holds).
  static const std::int64_t target = env_int("MLXCEL_GPU_QGEMV_TARGET_WARPS", kTargetWarps);
  while (ks < kWarps && tiles * ks < target && groups / (2 * ks) >= 2) ks *= 2;
  return ks;
}

// Column blocks go in y, at most 65,535 per launch (a 262k vocabulary has more).
template <typename Kernel>
void launch_grid(Kernel kernel, MmaParams mp, std::int64_t col_blocks, unsigned row_blocks,
                 const Stream& s) {
  constexpr std::int64_t kMaxGridY = 65535;
  for (std::int64_t c0 = 0; c0 < col_blocks; c0 += kMaxGridY) {
    mp.col_block0 = c0;
    const dim3 grid(row_blocks, static_cast<unsigned>(std::min(kMaxGridY, col_blocks - c0)));
    launch_kernel(kernel, grid, kThreads, 0, s, mp);
  }
}

// How qgemv_mma runs a matrix: the K split, the column blocks, and whether the one-group-per-lane
// kernel takes it (group sizes 32 / 64 with an even group count: a lane's two scales are one
// aligned word; MLXCEL_GPU_QGEMV_MMA_GPL=0: never). Depends on the matrix only.
struct Plan {
  MmaParams mp;
  std::int64_t col_blocks = 0;
  bool gpl = false;
};

Plan plan_of(const LinParams& p) {
  Plan pl;
  const int gs = p.w.group_size;
  pl.mp.p = p;
  pl.mp.groups = p.w.k / gs;
  const std::int64_t tiles = (p.w.n + kTileCols - 1) / kTileCols;
  static const bool gpl = env_int("MLXCEL_GPU_QGEMV_MMA_GPL", 1) != 0;
  pl.gpl = gpl && gs <= 64 && pl.mp.groups % 2 == 0;
  pl.mp.ks = choose_ks(tiles, pl.mp.groups);
  if (pl.gpl)
    while (pl.mp.ks > (pl.mp.groups + 3) / 4) pl.mp.ks /= 2;  // at most one warp per 4-group chunk
  pl.col_blocks = (tiles + (kWarps / pl.mp.ks) - 1) / (kWarps / pl.mp.ks);
  return pl;
}

// Whether the one-set kernel loads x a chunk ahead (XP). XP hides x's loads but takes
// registers: on sm_90 the 8B's paired kernel has 80 without it (3 blocks per SM) and 108 with it
// (2). Run 46 (H100, ncu): where the grid fits one wave at the higher occupancy that wins (the
// 8B's qkv, 384 blocks: 14.1 us unpaired, 11.0 paired, 13.9 paired with XP); where it does not,
// XP does (gate_up, 448 blocks: 38.8, 40.9, 36.9). So by default (MLXCEL_GPU_QGEMV_XPF=-1) XP
// runs where the grid exceeds one wave of the kernel without it, never for expert rows (the 30B:
// 345.5 tok/s paired, 338.8 with XP everywhere); 0 never, 1 always (measuring knobs). Both forms
// give the same bits, so the choice cannot break batch invariance.
template <typename T, int W, bool NS, bool PS>
bool use_xp(std::int64_t blocks, bool experts, const Stream& s) {
  static const int mode = env_int("MLXCEL_GPU_QGEMV_XPF", -1);
  if (mode >= 0) return mode != 0;
  if (experts) return false;
  static int wave[64] = {};  // per device: one wave of the kernel without XP
  const int d = s.device();
  if (d < 0 || d >= 64) return false;
  if (wave[d] == 0)
    wave[d] = std::max(
        1, resident_blocks(qgemv_mma_gpl_kernel<T, W, 1, false, NS, PS, false>, kThreads, 0, d));
  return blocks > wave[d];
}

bool mma_on(const Stream& s) {
  static const bool on = env_int("MLXCEL_GPU_QGEMV_MMA", 1) != 0;
  return on && mma_capable(s.device());
}

}  // namespace

template <typename T>
bool qgemv_mma(const LinParams& p, const Stream& s) {
  if constexpr (!std::is_same_v<T, bf16> && !std::is_same_v<T, f16>) {
    return false;
  } else {
    if (!mma_on(s)) return false;
    const int gs = p.w.group_size;
    Plan pl = plan_of(p);
    MmaParams& mp = pl.mp;
    const std::int64_t col_blocks = pl.col_blocks;
    // A pair of matrices (p.pair_y) goes as one launch only through the one-group-per-lane
    // kernel over expert rows; elsewhere the caller launches the two matrices one by one.
    const bool pair = p.pair_y != nullptr;
    if (pair && (!pl.gpl || !p.experts)) return false;
    if (pl.gpl) {
      // Column sets per block: 1 at 1-2 rows (and expert-indexed rows), else 2. Each row's
      // arithmetic is the same either way, so results are too. Measured at batch 16 (run 22):
      // 2 sets 1,108 tok/s, 1 set 843 (the weights re-read per row pair), 4 sets 910 (184
      // registers); capping registers at batch 1 lost: 4 blocks per SM (64 registers, 96 B
      // spilled) 236 -> 211 tok/s, 3 blocks (80, 16 B spilled) 239 -> 230 (runs 22-23).
      const int np = p.experts || p.m <= 2 ? 1 : 2;
      const unsigned row_blocks = blocks_for(p.m, p.experts ? 1 : 2 * np);
      // NS: the scales in the activation dtype (as MLX stores them), decoded inline.
      const bool ns = p.w.scales_code == (std::is_same_v<T, bf16> ? 1 : 2);
      // PS: scales and biases paired (as the op layer uploads them to GPUs).
      const bool ps = p.w.scale_step == 2;
      auto by_np = [&](auto wpl) {
        constexpr int W = decltype(wpl)::value;
        auto go = [&](auto nsc, auto psc) {
          constexpr bool NS = decltype(nsc)::value, PS = decltype(psc)::value;
          if (np == 2)
            return launch_grid(qgemv_mma_gpl_kernel<T, W, 2, false, NS, PS, false>, mp, col_blocks,
                               row_blocks, s);
          auto one_set = [&](auto xpc) {
            constexpr bool XP = decltype(xpc)::value;
            if (pair) {
              mp.pair_blocks = col_blocks;
              return launch_grid(qgemv_mma_gpl_kernel<T, W, 1, true, NS, PS, XP>, mp,
                                 2 * col_blocks, row_blocks, s);
            }
            launch_grid(qgemv_mma_gpl_kernel<T, W, 1, false, NS, PS, XP>, mp, col_blocks,
                        row_blocks, s);
          };
          if (use_xp<T, W, NS, PS>(col_blocks * row_blocks, p.experts != nullptr, s))
            return one_set(std::true_type{});
          one_set(std::false_type{});
        };
        auto by_ps = [&](auto nsc) {
          if (ps) return go(nsc, std::true_type{});
          go(nsc, std::false_type{});
        };
        if (ns) return by_ps(std::true_type{});
        by_ps(std::false_type{});
      };
      if (gs == 32)
        by_np(std::integral_constant<int, 1>{});
      else
        by_np(std::integral_constant<int, 2>{});
      return true;
    }
    const unsigned row_blocks = blocks_for(p.m, p.experts ? 1 : kRows);
    if (gs == 32)
      launch_grid(qgemv_mma_kernel<T, 1>, mp, col_blocks, row_blocks, s);
    else if (gs == 64)
      launch_grid(qgemv_mma_kernel<T, 2>, mp, col_blocks, row_blocks, s);
    else
      launch_grid(qgemv_mma_kernel<T, 4>, mp, col_blocks, row_blocks, s);
    return true;
  }
}

#else  // MLXCEL_GPU_HIP: no mma.sync; the SIMT qgemv serves every format.

template <typename T>
bool qgemv_mma(const LinParams&, const Stream&) {
  return false;
}

#endif

template bool qgemv_mma<float>(const LinParams&, const Stream&);
template bool qgemv_mma<bf16>(const LinParams&, const Stream&);
template bool qgemv_mma<f16>(const LinParams&, const Stream&);

}  // namespace mlxcel::gpu
