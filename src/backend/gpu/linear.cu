// Linear y = round(x · Wᵀ + bias) for every weight format, dequantizing in-kernel with fp32
// accumulation. Quantized weights with few rows (decode up to 64 rows, and expert-indexed MoE
// rows): qgemv_kernel, batch invariant; affine 4-bit with bf16 / f16 activations on CUDA sm_80+
// takes the tensor-core qgemv_mma (qgemv_mma.cu) instead. Dense weights with few rows (M <= 8):
// a GEMV with one warp per output column that streams each weight once for all rows (also the
// quantized path under MLXCEL_GPU_QGEMV=0).
// More rows (prefill): the matrix-unit GEMM (gemm_mma.cu: CUDA by default, HIP's WMMA under
// MLXCEL_GPU_GEMM_MMA=1), else a 64x64 tiled SIMT GEMM over 32-wide K slices staged through
// shared memory; expert-indexed rows that moe.cu grouped by expert take the same matrix-unit
// GEMM tile by tile. Every kernel applies the accumulate fusion as store_lin does (the
// matrix-unit GEMM through its staged output tile); a fused input (norm or gated activation)
// runs in the matrix-unit decode GEMV's prologue where it can (qgemv_mma.cu), else as its own
// launch first. Same source for CUDA and HIP.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/linear.cuh"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {
namespace {

constexpr int kGemvWarps = 4;
constexpr int kGemvRows = 8;  // activation rows per GEMV block (decode batch)
constexpr int kTile = 64, kThreads = 256;

// grid (ceil(n / kGemvWarps), ceil(m / rows_per_block)); warp w of a block computes column n for
// up to kGemvRows rows (1 row when rows are expert-indexed: each may use another matrix).
template <typename T, int F>
__global__ void gemv_kernel(LinParams p) {
  wait_previous_kernel();
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
  const std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (n >= p.w.n) return;
  const int per = p.experts ? 1 : kGemvRows;
  const std::int64_t m0 = (p.row_block0 + static_cast<std::int64_t>(blockIdx.y)) * per;
  const int mc = static_cast<int>(p.m - m0 < per ? p.m - m0 : per);
  const WPtrs wp = wptrs(p, m0);
  const T* x = static_cast<const T*>(p.x);
  float acc[kGemvRows];
#pragma unroll
  for (int i = 0; i < kGemvRows; ++i) acc[i] = 0.0f;
  const std::int64_t k = p.w.k, units = (k + 31) / 32;
  for (std::int64_t u = lane; u < units; u += MLXCEL_WARP_SIZE) {
    float v[32];
    decode_unit<F>(wp.w, wp.scales, wp.biases, p.w.scales_code, p.w.scale_step, p.w.group_size, k,
                   n, u, v);
#pragma unroll
    for (int i = 0; i < kGemvRows; ++i) {
      if (i < mc) {
        const T* xr = x + ((m0 + i) / p.x_div) * p.x_stride + u * 32;
        float s = 0.0f;
        if (!fmt_dense(F) || u * 32 + 32 <= k) {
#pragma unroll
          for (int j = 0; j < 32; ++j) s += v[j] * to_f32(xr[j]);
        } else {
#pragma unroll
          for (int j = 0; j < 32; ++j)
            if (u * 32 + j < k) s += v[j] * to_f32(xr[j]);
        }
        acc[i] += s;
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kGemvRows; ++i) {
    if (i < mc) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) store_lin<T>(p, (m0 + i) * p.y_stride + n, n, s);
    }
  }
}

// --- Quantized decode GEMV ---------------------------------------------------------------
// Few rows of a quantized matrix (decode, up to kQgemvMaxRows rows, and expert-indexed MoE rows).
// A block of kQWarps warps owns kQCols * (kQWarps / ksplit) output columns: each group of
// `ksplit` warps shares kQCols columns and splits K between its lanes (lane l of the group's warp
// w takes 32-weight units (w * 32 + l) + i * ksplit * 32). Per unit a thread loads the columns'
// packed words and scales once, decodes 8 weights at a time, and applies them to each row's 8 x
// values (one 16-byte load when rows are aligned), so a weight is decoded once for all rows and
// an x value converted once for all columns. Codes become floats without integer-to-float
// conversions (the 2^23 mantissa trick), and affine units factor as s * sum(c x) + b * sum(x).
// The reduction (per lane, then warp_sum, then the group's warps in order) depends on K only,
// never on the number of rows: a row's result is the same alone or in a batch of 64.
constexpr int kQWarps = 4, kQCols = 4;
constexpr int kQThreads = kQWarps * MLXCEL_WARP_SIZE;
constexpr int kQgemvMaxRows = 64;

// One column's 32-weight unit: the packed words and its scales (both halves for nvfp4's 16-wide
// groups; affine also has a bias).
template <int F>
struct QUnit {
  std::uint32_t w[fmt_bits(F)];
  float s0, s1, b;
};

// Where a unit's affine scale and bias sit: groups per row and log2(units per group), computed
// on the host (a 64-bit division per column and unit cost more than the unit's arithmetic).
// gshift < 0: a group size that is not 32 << s (never in MLX checkpoints), divided per unit.
struct GroupIndex {
  std::int64_t per_row = 0;
  int shift = -1;
};

template <int F>
__device__ __forceinline__ void load_qunit(QUnit<F>& q, const WPtrs& wp, const WView& v,
                                           const GroupIndex& gi, std::int64_t n, std::int64_t u) {
  constexpr int B = fmt_bits(F);
  const std::int64_t k = v.k;
  const std::uint32_t* row = static_cast<const std::uint32_t*>(wp.w) + n * (k * B / 32) + u * B;
  if constexpr (B % 4 == 0) {  // 16-byte aligned units (qgemv_aligned): B / 4 vector loads
#pragma unroll
    for (int i = 0; i < B / 4; ++i) {
      const uint4 v4 = reinterpret_cast<const uint4*>(row)[i];
      q.w[4 * i] = v4.x, q.w[4 * i + 1] = v4.y, q.w[4 * i + 2] = v4.z, q.w[4 * i + 3] = v4.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < B; ++i) q.w[i] = row[i];
  }
  q.b = 0.0f;
  if constexpr (fmt_affine(F)) {
    const std::int64_t g =
        (n * gi.per_row + (gi.shift >= 0 ? u >> gi.shift : (u * 32) / v.group_size)) * v.scale_step;
    if (v.scale_step == 2) {  // paired: scale and bias in one load
      load_code_pair(wp.scales, v.scales_code, g, q.s0, q.b);
      q.s1 = q.s0;
    } else {
      q.s0 = q.s1 = load_code(wp.scales, v.scales_code, g);
      q.b = load_code(wp.biases, v.scales_code, g);
    }
  } else if constexpr (F == kNvfp4) {
    const auto* sc = static_cast<const std::uint8_t*>(wp.scales) + n * (k / 16) + 2 * u;
    q.s0 = e4m3_value(sc[0]);
    q.s1 = e4m3_value(sc[1]);
  } else {
    q.s0 = q.s1 = e8m0_scale(static_cast<const std::uint8_t*>(wp.scales)[n * (k / 32) + u]);
  }
}

// The unscaled value of weight j (0..31, a constant after unrolling) of a unit: the affine code,
// or the fp4 / fp8 element.
template <int F>
__device__ __forceinline__ float qunit_value(const QUnit<F>& q, int j) {
  constexpr int B = fmt_bits(F);
  const int bit = j * B, wi = bit >> 5, sh = bit & 31;
  std::uint32_t c = q.w[wi] >> sh;
  if (sh + B > 32) c |= q.w[wi + 1] << (32 - sh);
  c &= (1u << B) - 1u;
  if constexpr (fmt_affine(F)) {
    return __uint_as_float(0x4B000000u | c) - 8388608.0f;  // exact for c < 2^23
  } else if constexpr (F == kMxfp8) {
    return e4m3_value(c);
  } else {
    // E2M1 from its bits: exponent e > 0 gives (1 + m/2) 2^(e-1), e = 0 the subnormal m/2.
    const std::uint32_t e = (c >> 1) & 3u, m = c & 1u;
    const std::uint32_t mag = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3F000000u : 0u);
    return __uint_as_float(mag | ((c & 8u) << 28));
  }
}

// Weights j0 .. j0 + 7 of a unit (j0 a multiple of 8). Affine 4- and 8-bit codes go from bytes to
// floats with one byte permute each (0x4B0000cc is 2^23 + c): 4-bit words are split once into
// the even and odd nibbles; the values and their order are those of qunit_value.
template <int F>
__device__ __forceinline__ void qunit_values8(const QUnit<F>& q, int j0, float (&v)[8]) {
  constexpr int B = fmt_bits(F);
  if constexpr (fmt_affine(F) && B == 4) {
    const std::uint32_t w = q.w[j0 / 8];
    const std::uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = __uint_as_float(__byte_perm(e & 1 ? hi : lo, 0x4B000000u, 0x7440u | (e >> 1))) -
             8388608.0f;
  } else if constexpr (fmt_affine(F) && B == 8) {
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[e] = __uint_as_float(__byte_perm(q.w[(j0 + e) / 4], 0x4B000000u, 0x7440u | (e & 3))) -
             8388608.0f;
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = qunit_value<F>(q, j0 + e);
  }
}

// x[0..7] as fp32 from one 16-byte load (qgemv runs only on 16-byte aligned rows); bf16 becomes
// fp32 by placing its bits, two per 32-bit word, without unpacking 16-bit halves first.
template <typename T>
__device__ __forceinline__ void load8(const T* p, float (&v)[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const std::uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if constexpr (std::is_same_v<T, bf16>) {
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
      } else {
        v[2 * i] = f16::from_bits(static_cast<std::uint16_t>(w[i])).to_float();
        v[2 * i + 1] = f16::from_bits(static_cast<std::uint16_t>(w[i] >> 16)).to_float();
      }
    }
  } else {
    const float4 a = reinterpret_cast<const float4*>(p)[0];
    const float4 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z,
    v[7] = b.w;
  }
}

// One 32-weight unit of kQCols columns applied to up to R rows: acc[r][c] += W[c, unit] . x[r,
// unit].
template <typename T, int F, int R>
__device__ __forceinline__ void qgemv_unit(float (&acc)[R][kQCols], const QUnit<F> (&qu)[kQCols],
                                           const T* const (&xr)[R], int mc, std::int64_t u) {
  float xs[R];
#pragma unroll
  for (int r = 0; r < R; ++r) xs[r] = 0.0f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float d[R][kQCols];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kQCols; ++c) d[r][c] = 0.0f;
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int j0 = h * 16 + q * 8;
      float wv[kQCols][8];
#pragma unroll
      for (int c = 0; c < kQCols; ++c) qunit_values8<F>(qu[c], j0, wv[c]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (r < mc) {
          float xv[8];
          load8(xr[r] + u * 32 + j0, xv);
#pragma unroll
          for (int e = 0; e < 8; ++e) {
            if constexpr (fmt_affine(F)) xs[r] += xv[e];
#pragma unroll
            for (int c = 0; c < kQCols; ++c) d[r][c] = fmaf(wv[c][e], xv[e], d[r][c]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kQCols; ++c)
        acc[r][c] = fmaf(h ? qu[c].s1 : qu[c].s0, d[r][c], acc[r][c]);
  }
  if constexpr (fmt_affine(F)) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < kQCols; ++c) acc[r][c] = fmaf(qu[c].b, xs[r], acc[r][c]);
  }
}

// Rows per qgemv block: 1 for one row and for expert-indexed rows (each may use another
// matrix), else 4. A row's bits do not depend on it.
__host__ __device__ constexpr int qgemv_block_rows(std::int64_t m, bool experts) {
  return experts || m == 1 ? 1 : 4;
}

struct QgemvParams {
  LinParams p;
  int ksplit;                   // warps per column group: 1, 2 or 4
  GroupIndex groups;            // affine formats
  std::int64_t col_block0 = 0;  // the first column block of this launch
};

// grid (row blocks, column blocks); R rows per block (1 for decode at batch 1 and for
// expert-indexed rows, which may each use another matrix).
template <typename T, int F, int R>
__global__ void __launch_bounds__(kQThreads) qgemv_kernel(QgemvParams qp) {
  wait_previous_kernel();
  const LinParams& p = qp.p;
  __shared__ float red[kQWarps][R][kQCols];
  const int warp = threadIdx.x / MLXCEL_WARP_SIZE, lane = threadIdx.x % MLXCEL_WARP_SIZE;
  const int ks = qp.ksplit, group = warp / ks, gw = warp % ks;
  const int col_groups = kQWarps / ks;
  const std::int64_t cb = qp.col_block0 + static_cast<std::int64_t>(blockIdx.y);
  const std::int64_t n0 = (cb * col_groups + group) * kQCols;
  const std::int64_t m0 = static_cast<std::int64_t>(blockIdx.x) * R;
  const int mc = static_cast<int>(p.m - m0 < R ? p.m - m0 : R);
  const WPtrs wp = wptrs(p, m0);
  // The rows' x pointers, once (a 64-bit division per row and unit cost more than its FMAs).
  const T* xr[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    xr[r] = static_cast<const T*>(p.x) + ((m0 + (r < mc ? r : 0)) / p.x_div) * p.x_stride;
  const std::int64_t units = p.w.k / 32;
  float acc[R][kQCols];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int c = 0; c < kQCols; ++c) acc[r][c] = 0.0f;
  auto load_units = [&](QUnit<F>(&qu)[kQCols], std::int64_t u) {
#pragma unroll
    for (int c = 0; c < kQCols; ++c) {
      const std::int64_t n = n0 + c < p.w.n ? n0 + c : p.w.n - 1;
      load_qunit<F>(qu[c], wp, p.w, qp.groups, n, u);
    }
  };
  const std::int64_t step = static_cast<std::int64_t>(ks) * MLXCEL_WARP_SIZE;
  // Units in increasing order per lane (the reduction order), one at a time. Requesting the
  // next unit before decoding this one (run 15) took 120 registers instead of 96 and made the
  // 8B's gate_up slower (60 -> 72 us): occupancy hid the latency better than the pipeline.
  for (std::int64_t u = gw * MLXCEL_WARP_SIZE + lane; u < units; u += step) {
    QUnit<F> qu[kQCols];
    load_units(qu, u);
    qgemv_unit<T, F, R>(acc, qu, xr, mc, u);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (r < mc) {
#pragma unroll
      for (int c = 0; c < kQCols; ++c) {
        const float v = warp_sum(acc[r][c]);
        if (lane == 0) red[warp][r][c] = v;
      }
    }
  }
  __syncthreads();
  // One thread per (row, column) of each group adds the group's warps in order.
  for (int i = threadIdx.x; i < col_groups * R * kQCols; i += kQThreads) {
    const int g = i / (R * kQCols), r = (i / kQCols) % R, c = i % kQCols;
    const std::int64_t n = (cb * col_groups + g) * kQCols + c;
    if (r >= mc || n >= p.w.n) continue;
    float s = red[g * ks][r][c];
    for (int w = 1; w < ks; ++w) s += red[g * ks + w][r][c];
    store_lin<T>(p, (m0 + r) * p.y_stride + n, n, s);
  }
}

// Warps per column group. Measured on the H200 (run 13, 8B tg128): 2 warps per group gave 141
// tok/s, 4 gave 134 and 1 gave 122 (run 12's >= 4 units per lane also lost); below 2 units per
// lane one warp takes the column. MLXCEL_GPU_QGEMV_KSPLIT = 1, 2 or 4 forces one (a measuring
// knob).
int qgemv_ksplit(std::int64_t units) {
  static const int forced = [] {
    const char* v = std::getenv("MLXCEL_GPU_QGEMV_KSPLIT");
    const int k = v ? std::atoi(v) : 0;
    return k == 1 || k == 2 || k == 4 ? k : 0;
  }();
  if (forced) return forced;
  return units >= 2 * MLXCEL_WARP_SIZE ? 2 : 1;
}

bool qgemv_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MLXCEL_GPU_QGEMV");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return on;
}

// grid (ceil(n / 64), ceil(m / 64)), 256 threads, each 4x4 outputs. Per 32-wide K slice, the X
// tile is staged as fp32 and 64 threads dequantize one weight unit each into shared memory.
template <typename T, int F>
__global__ void gemm_kernel(LinParams p) {
  wait_previous_kernel();
  __shared__ float xs[32][kTile + 4];
  __shared__ float ws[32][kTile + 4];
  const int tid = threadIdx.x, tm = tid / 16, tn = tid % 16;
  const std::int64_t mb = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t nb = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const std::int64_t k = p.w.k, units = (k + 31) / 32;
  const T* x = static_cast<const T*>(p.x);
  float acc[4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
  for (std::int64_t u = 0; u < units; ++u) {
    for (int i = tid; i < kTile * 32; i += kThreads) {
      const int r = i / 32, kk = i % 32;
      const std::int64_t m = mb + r, idx = u * 32 + kk;
      xs[kk][r] = (m < p.m && idx < k) ? to_f32(x[m * p.x_stride + idx]) : 0.0f;
    }
    if (tid < kTile) {
      const std::int64_t n = nb + tid;
      float v[32];
      if (n < p.w.n) {
        decode_unit<F>(p.w.w, p.w.scales, p.w.biases, p.w.scales_code, p.w.scale_step,
                       p.w.group_size, k, n, u, v);
      } else {
#pragma unroll
        for (int j = 0; j < 32; ++j) v[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 32; ++j) ws[j][tid] = v[j];
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < 32; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        a[i] = xs[kk][tm * 4 + i];
        b[i] = ws[kk][tn + 16 * i];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t m = mb + tm * 4 + i;
    if (m >= p.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::int64_t n = nb + tn + 16 * j;
      if (n < p.w.n) store_lin<T>(p, m * p.y_stride + n, n, acc[i][j]);
    }
  }
}

// qgemv's loads are 16 bytes wide: x rows and (4- and 8-bit) weight matrices must be 16-byte
// aligned. MLX checkpoints and our activation buffers are; anything else takes the generic path.
template <typename T, int F>
bool qgemv_aligned(const LinParams& p) {
  const bool x_ok = reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 &&
                    (p.x_stride * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  const bool w_ok = fmt_bits(F) % 4 != 0 ||
                    (reinterpret_cast<std::uintptr_t>(p.w.w) % 16 == 0 && p.w.expert_stride_w % 16 == 0);
  return x_ok && w_ok;
}

template <typename T, int F, int R>
void launch_qgemv(const LinParams& p, const Stream& s) {
  QgemvParams qp;
  qp.p = p;
  const std::int64_t units = p.w.k / 32;
  qp.ksplit = qgemv_ksplit(units);
  if (fmt_affine(F)) {
    const int gs = p.w.group_size;
    qp.groups.per_row = p.w.k / gs;
    for (int sh = 0; sh < 8; ++sh)
      if (gs == (32 << sh)) qp.groups.shift = sh;
  }
  const int cols_per_block = kQCols * (kQWarps / qp.ksplit);
  // Row blocks in x (fastest, and up to 2^31 - 1 of them): the blocks sharing a column group run
  // together and read its weights from L2, not DRAM, once per row block.
  // Column blocks in y, at most 65,535 per launch (a 262k vocabulary over 4-column blocks has
  // more).
  constexpr std::int64_t kMaxGridY = 65535;
  const std::int64_t col_blocks = blocks_for(p.w.n, cols_per_block);
  for (std::int64_t c0 = 0; c0 < col_blocks; c0 += kMaxGridY) {
    qp.col_block0 = c0;
    const dim3 grid(blocks_for(p.m, R), static_cast<unsigned>(std::min(kMaxGridY, col_blocks - c0)));
    launch_kernel(qgemv_kernel<T, F, R>, grid, kQThreads, 0, s, qp);
  }
}

template <typename T, int F>
void launch(const LinParams& p, bool gemm, const Stream& s) {
  // A pair of matrices (MoE gate and up): one launch where the decode GEMV takes both, else the
  // two matrices one by one through the paths below.
  if (p.pair_y) {
    if constexpr (F == kAffine4) {
      if (!p.tiles.order && qgemv_enabled() && qgemv_aligned<T, F>(p) &&
          reinterpret_cast<std::uintptr_t>(p.pair_w) % 16 == 0 && qgemv_mma<T>(p, s))
        return;
    }
    LinParams first = p;
    first.pair_w = first.pair_scales = first.pair_biases = nullptr;
    first.pair_y = nullptr;
    LinParams second = first;
    second.w.w = p.pair_w, second.w.scales = p.pair_scales, second.w.biases = p.pair_biases;
    second.y = p.pair_y;
    launch<T, F>(first, gemm, s);
    launch<T, F>(second, gemm, s);
    return;
  }
  // Expert rows grouped by expert (MoE prefill): the matrix-unit GEMM, tile by tile, where it
  // runs; else the per-row paths below, which ignore the grouping.
  if (p.tiles.order && gemm_mma<T, F>(p, s)) return;
  if constexpr (!fmt_dense(F)) {
    if (qgemv_enabled() && (p.experts || p.m <= kQgemvMaxRows) && qgemv_aligned<T, F>(p)) {
      if constexpr (F == kAffine4) {
        if (qgemv_mma<T>(p, s)) return;
      }
      if (qgemv_block_rows(p.m, p.experts) == 1) return launch_qgemv<T, F, 1>(p, s);
      return launch_qgemv<T, F, 4>(p, s);
    }
  }
  if (gemm) {
    if (gemm_mma<T, F>(p, s)) return;
    dim3 grid(blocks_for(p.w.n, kTile), blocks_for(p.m, kTile));
    launch_kernel(gemm_kernel<T, F>, grid, kThreads, 0, s, p);
  } else {
    // Expert-indexed rows are one block row each: a MoE step of T tokens x top_k experts can
    // pass grid.y's 65,535 (16 sequences prefilling 512 tokens into a top-8 MoE), so the rows go
    // in launches of at most that many block rows.
    constexpr std::int64_t kMaxGridY = 65535;
    const std::int64_t row_blocks = blocks_for(p.m, p.experts ? 1 : kGemvRows);
    for (std::int64_t b0 = 0; b0 < row_blocks; b0 += kMaxGridY) {
      LinParams q = p;
      q.row_block0 = b0;
      const dim3 grid(blocks_for(p.w.n, kGemvWarps),
                      static_cast<unsigned>(std::min(kMaxGridY, row_blocks - b0)));
      launch_kernel(gemv_kernel<T, F>, grid, kGemvWarps * MLXCEL_WARP_SIZE, 0, s, q);
    }
  }
}

template <typename T, int F = 0>
void launch_fmt(int fmt, const LinParams& p, bool gemm, const Stream& s) {
  if constexpr (F < kWFmtCount) {
    if (fmt == F) return launch<T, F>(p, gemm, s);
    return launch_fmt<T, F + 1>(fmt, p, gemm, s);
  }
}

}  // namespace

namespace kernels {

bool weight_format_supported(backend::QMode mode, DType w_dtype, int bits, int group_size,
                             DType scales_dtype) {
  return wfmt_of(mode, w_dtype, bits, group_size, scales_dtype) >= 0;
}

namespace {
// The launch parameters of a linear, checked: a format or shape no kernel takes is refused with
// what to do; `fmt` is the kernel format.
LinParams lin_params(const ExpertLinear& a, int& fmt) {
  const backend::Matrix& m = a.w;
  const std::int64_t rows = a.y.rows;
  fmt = wfmt_of(m.mode, m.w_dtype, m.bits, m.group_size, m.scales_dtype);
  if (fmt < 0)
    throw_error(ErrorCategory::kUnsupported,
                std::string("linear: no GPU kernel for weight format ") +
                    backend::qmode_name(m.mode) + " " + std::to_string(m.bits) + "-bit gs " +
                    std::to_string(m.group_size) + "; run with --device cpu");
  if (m.mode != backend::QMode::kNone && m.k % 32 != 0)
    throw_error(ErrorCategory::kUnsupported,
                "linear: quantized GPU kernels need K % 32 == 0, got K = " + std::to_string(m.k) +
                    "; run with --device cpu");
  MLXCEL_CHECK(a.x.dtype == a.y.dtype && a.x.cols == m.k && a.y.cols == m.n,
               ErrorCategory::kInternal, "gpu linear: x / y dtype or shape mismatch");
  MLXCEL_CHECK(
      paired_scales_ok(m), ErrorCategory::kInternal,
      "gpu linear: paired scales need an affine matrix with biases one element after scales");
  MLXCEL_CHECK(!a.norm_weight || (!a.experts && a.x_div == 1 && a.norm_src.rows == rows &&
                                   a.norm_src.cols == m.k && a.norm_src.dtype == a.x.dtype),
               ErrorCategory::kInternal, "gpu linear: norm source shape");
  MLXCEL_CHECK(!a.gated_in || (!a.experts && !a.norm_weight && a.x_div == 1 &&
                               a.gated_src.rows == rows && a.gated_src.cols == 2 * m.k &&
                               a.gated_src.dtype == a.x.dtype),
               ErrorCategory::kInternal, "gpu linear: gated input shape");
  LinParams p;
  p.x = a.x.data;
  p.x_stride = a.x.stride;
  p.x_div = a.x_div;
  p.w = wview(m);
  p.experts = a.experts;
  p.tiles = a.experts ? a.tiles : kernels::ExpertTiles{};
  p.bias = a.bias;
  p.y = a.y.data;
  p.y_stride = a.y.stride;
  p.m = rows;
  p.round = round_code(a.round);
  p.accumulate = a.accumulate;
  if (a.pair) {
    const backend::Matrix& q = *a.pair;
    MLXCEL_CHECK(kernels::same_layout(m, q) && a.pair_y.rows == rows && a.pair_y.cols == m.n &&
                     a.pair_y.stride == a.y.stride && a.pair_y.dtype == a.y.dtype && !a.bias &&
                     !a.accumulate && !a.gated_in,
                 ErrorCategory::kInternal, "gpu linear: pair matrix differs");
    p.pair_w = q.w;
    p.pair_scales = q.scales;
    p.pair_biases = q.biases;
    p.pair_y = a.pair_y.data;
  }
  return p;
}

kernels::ExpertLinear expert_linear_of(const backend::LinearArgs& a) {
  kernels::ExpertLinear e;
  e.x = a.x;
  e.w = a.w;
  e.bias = a.bias;
  e.y = a.y;
  e.round = a.round;
  e.accumulate = a.accumulate;
  e.norm_weight = a.norm_weight;
  e.norm_eps = a.norm_eps;
  e.norm_src = a.norm_src;
  e.gated_in = a.gated_in;
  e.gated_act = a.gated_act;
  e.gated_src = a.gated_src;
  return e;
}

}  // namespace

void linear_experts(const ExpertLinear& a, const Stream& s) {
  const backend::Matrix& m = a.w;
  const std::int64_t rows = a.y.rows;
  if (rows <= 0 || m.n == 0) return;
  int fmt = -1;
  const LinParams p = lin_params(a, fmt);
  // Quantized formats: the GEMV up to kQgemvMaxRows rows (launch decides); dense: up to kGemvRows.
  const bool gemm = !a.experts && rows > kGemvRows;
  dispatch_act(a.x.dtype, "linear", [&](auto tag) {
    using T = decltype(tag);
    // The fused input (norm or gated activation): its own kernel before the product (run 34
    // measured it inside the decode GEMV's prologue slower: dev/NOTES.md, session 20).
    if (a.norm_weight) rms_norm({a.norm_src, a.norm_weight, a.norm_eps, a.x, a.round, 1}, s);
    if (a.gated_in)
      gated_activation({a.gated_act, a.gated_src.sub(0, m.k), a.gated_src.sub(m.k, m.k), a.x,
                        a.round}, s);
    launch_fmt<T>(fmt, p, gemm, s);
  });
  check_launch("linear", s.device());
}

void linear(const backend::LinearArgs& a, const Stream& s) {
  linear_experts(expert_linear_of(a), s);
}

}  // namespace kernels
}  // namespace mlxcel::gpu
