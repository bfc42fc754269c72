// Prefill linears (more than 64 rows) on the matrix units, bf16 / f16 activations, every
// quantized weight format and dense weights of the activation dtype:
//  - NVIDIA sm_80+: mma.sync m16n8k16 (operands by ldmatrix);
//  - AMD RDNA3 / RDNA3.5 (gfx11xx, gfx1151 among them): wave32 WMMA 16x16x16 (operands read from
//    LDS as 16 contiguous elements per lane). Other AMD targets (gfx12) keep the SIMT kernel.
//
// Why: the SIMT gemm_kernel (linear.cu) multiplies in fp32 FMAs, ~1.5 TFLOP/s on the H200: 83 ms
// for the 8B's gate_up over a 512-token prompt (run 22), and pp512 at 1,356 tok/s against
// llama.cpp's 10,704. The matrix units do the same products at tens to hundreds of TFLOP/s.
//
// Shape (both vendors): a block of 8 warps / waves computes a 128 (rows) x 128 (output columns)
// tile, each warp 64 x 32, over K slices of 64 (two 32-weight units). Per slice the block stages
// its X rows (16-byte loads) and its 128 weight columns, dequantized by decode_unit and rounded to
// the activation dtype (what MLX's own quantized matmuls multiply), in shared memory. Row strides
// are 72 elements (144 bytes) so the 8 rows of an ldmatrix fall in distinct banks.
//
// Numerics: products of the rounded weights accumulate in fp32, so results differ from the SIMT
// kernel's fp32 weights by about one rounding of each weight; test_backend_ops and the selftest's
// 80-row linears check both against the CPU. The decode path (<= 64 rows) never comes here, so
// decode stays batch invariant.
//
// Grouped expert rows (MoE prefill, p.tiles): grid.y walks tiles of one expert's rows (moe.cu
// groups the router's choices on the device), each block looks its 128 row indices up once and
// then runs the same staging and mma code against that expert's matrix, reading it once per tile
// instead of once per row as the expert-row GEMV does. A row's result does not depend on which
// tile or tile row holds it (every output is the same k-ordered mma chain over its own x row),
// so the order in which the grouping places rows cannot change a bit.
//
// Default: on for CUDA, where run 24 measured it on the H200 (8B pp512 1,396 -> 5,807 tok/s,
// 0.6B 13,416 -> 23,045; test_backend_ops passed with it); MLXCEL_GPU_GEMM_MMA=0 turns it off.
// On HIP the WMMA kernel has run on no GPU yet, so it stays off unless MLXCEL_GPU_GEMM_MMA=1
// (the selftest's 80-row linears check it on a gfx11 owner's machine).
#include <cstdint>
#include <type_traits>

#include "backend/gpu/linear.cuh"
#include "backend/gpu/mma.cuh"

namespace mlxcel::gpu {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64;  // block tile and K slice
constexpr int kWarpM = 64, kWarpN = 32;        // warp tile: 4 x 4 (CUDA) / 4 x 2 (WMMA) tiles
constexpr int kThreads = 256;                  // 2 x 4 warps
constexpr int kStride = kBK + 8;               // shared row stride in elements (144 bytes)

template <typename T>
struct Tiles {
  T x[kBM][kStride];
  T w[kBN][kStride];
};

// Eight fp32 values rounded to T (nearest even: one cvt per pair on sm_80+, one per value for
// f16 on AMD), as four 32-bit words with element 2i in the low half of word i.
template <typename T>
__device__ __forceinline__ uint4 pack8(const float* v) {
  std::uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if __CUDA_ARCH__ >= 800
    if constexpr (std::is_same_v<T, bf16>)
      asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(w[i]) : "f"(v[2 * i + 1]), "f"(v[2 * i]));
    else
      asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(w[i]) : "f"(v[2 * i + 1]), "f"(v[2 * i]));
#elif defined(__HIP_DEVICE_COMPILE__)
    if constexpr (std::is_same_v<T, f16>)  // v_cvt_f16_f32: nearest even, like f16's from_float
      w[i] = static_cast<std::uint32_t>(
                 __builtin_bit_cast(std::uint16_t, static_cast<_Float16>(v[2 * i]))) |
             (static_cast<std::uint32_t>(
                  __builtin_bit_cast(std::uint16_t, static_cast<_Float16>(v[2 * i + 1])))
              << 16);
    else
      w[i] = static_cast<std::uint32_t>(bf16(v[2 * i]).bits) |
             (static_cast<std::uint32_t>(bf16(v[2 * i + 1]).bits) << 16);
#else
    w[i] = static_cast<std::uint32_t>(from_f32<T>(v[2 * i]).bits) |
           (static_cast<std::uint32_t>(from_f32<T>(v[2 * i + 1]).bits) << 16);
#endif
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// Which x row and which output row each of a block's 128 tile rows is, and whether it has one.
// Plain linears: rows mb .. mb + 127 of both, up to m.
struct PlainRows {
  std::int64_t mb, m;
  __device__ __forceinline__ bool has(int r) const { return mb + r < m; }
  __device__ __forceinline__ std::int64_t x(int r) const { return mb + r; }
  __device__ __forceinline__ std::int64_t y(int r) const { return mb + r; }
};
// Grouped expert rows: the tile's rows as the block looked them up into shared memory (-1 past
// the tile's rows).
struct TileRows {
  const std::int32_t* xr;
  const std::int32_t* yr;
  __device__ __forceinline__ bool has(int r) const { return yr[r] >= 0; }
  __device__ __forceinline__ std::int64_t x(int r) const { return xr[r]; }
  __device__ __forceinline__ std::int64_t y(int r) const { return yr[r]; }
};

// Stages K slice [k0, k0 + 64) of the block's X rows and weight columns (zero past the rows, n
// or k).
template <typename T, int F, typename Rows>
__device__ __forceinline__ void stage_slice(Tiles<T>& sm, const LinParams& p, const Rows& rows,
                                            const WPtrs& wp, std::int64_t nb, std::int64_t k0) {
  const int tid = threadIdx.x;
  const std::int64_t k = p.w.k, units = k / 32;
  const T* x = static_cast<const T*>(p.x);
  // X: 128 rows x 64 elements = 1,024 16-byte chunks, 4 per thread.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int idx = tid + i * kThreads, r = idx / 8, c = (idx % 8) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (rows.has(r) && k0 + c < k)
      v = *reinterpret_cast<const uint4*>(x + rows.x(r) * p.x_stride + k0 + c);
    *reinterpret_cast<uint4*>(&sm.x[r][c]) = v;
  }
  // W: thread t dequantizes unit t / 128 of the slice for column t % 128.
  const int col = tid % kBN, half = tid / kBN;
  const std::int64_t n = nb + col, u = k0 / 32 + half;
  float v[32];
  if (n < p.w.n && u < units) {
    decode_unit<F>(wp.w, wp.scales, wp.biases, p.w.scales_code, p.w.scale_step, p.w.group_size, k,
                   n, u, v);
  } else {
#pragma unroll
    for (int j = 0; j < 32; ++j) v[j] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    *reinterpret_cast<uint4*>(&sm.w[col][half * 32 + j * 8]) = pack8<T>(v + j * 8);
}

// The output tile is staged in shared memory (the operand tiles are dead once the K loop ends)
// and leaves in 16-byte row segments: the mma / WMMA fragment layouts would store 2-byte values
// scattered over eight rows, and an accumulating linear would read the residual the same way
// (run 27: that epilogue, through store_lin, cost 5-9 % of prefill in register spills alone).
// Row stride 136 elements (272 bytes): 16-byte aligned rows, and the mma fragments' 4-byte
// stores (rows g, columns 2q) fall in distinct banks.
constexpr int kOutStride = kBN + 8;
constexpr int kSeg = 8;  // elements per 16-byte segment
static_assert(kBM * kOutStride * 2 <= sizeof(Tiles<bf16>), "the output tile reuses the operands'");
static_assert(kBM == kGemmTileRows, "moe.cu groups expert rows into tiles of this GEMM's rows");

// Tile element (r, c) = round(acc + bias[nb + c]): store_lin's value before any residual add.
// (Rounding to T is exact here: the GEMM runs only for bf16 / f16 activations, whose round code
// is their own dtype.)
template <typename T>
__device__ __forceinline__ float staged(const LinParams& p, std::int64_t n, float acc) {
  return rnd(acc + (p.bias && n < p.w.n ? p.bias[n] : 0.0f), p.round);
}

// y[rows.y(r), nb + c] = tile[r][c] inside the matrix; accumulating, round(y + tile[r][c]) as
// store_lin adds. Whole 16-byte segments where y's alignment allows, else element by element.
template <typename T, typename Rows>
__device__ __forceinline__ void write_tile(const T* tile, const LinParams& p, const Rows& rows,
                                           std::int64_t nb) {
  T* y = static_cast<T*>(p.y);
  const bool vec = reinterpret_cast<std::uintptr_t>(y) % 16 == 0 &&
                   (p.y_stride * static_cast<std::int64_t>(sizeof(T))) % 16 == 0;
  constexpr int kSegs = kBN / kSeg;
  for (int s = threadIdx.x; s < kBM * kSegs; s += kThreads) {
    const int r = s / kSegs, c = (s % kSegs) * kSeg;
    const std::int64_t m = rows.y(r), n = nb + c;
    if (!rows.has(r) || n >= p.w.n) continue;
    T* dst = y + m * p.y_stride + n;
    const T* src = tile + r * kOutStride + c;
    if (vec && n + kSeg <= p.w.n) {
      uint4 v = *reinterpret_cast<const uint4*>(src);
      if (p.accumulate) {
        const uint4 o = *reinterpret_cast<const uint4*>(dst);
        T a[kSeg], b[kSeg];
        __builtin_memcpy(a, &o, sizeof(o));
        __builtin_memcpy(b, &v, sizeof(v));
#pragma unroll
        for (int e = 0; e < kSeg; ++e)
          b[e] = from_f32<T>(rnd(to_f32(a[e]) + to_f32(b[e]), p.round));
        __builtin_memcpy(&v, b, sizeof(v));
      }
      *reinterpret_cast<uint4*>(dst) = v;
    } else {
      for (int e = 0; e < kSeg && n + e < p.w.n; ++e) {
        float v = to_f32(src[e]);
        if (p.accumulate) v = to_f32(dst[e]) + v;
        store(dst, e, v, p.round);
      }
    }
  }
}

// Grouped expert rows: looks up the rows of tile blockIdx.y into xr / yr (shared) and sets wp
// to its expert's matrix; false when the tile is past *tile_count (the grid is sized for the
// most tiles the grouping can make). Every thread of the block returns the same.
// (Unused where the WMMA kernel is a stub.)
[[maybe_unused]] __device__ __forceinline__ bool load_tile_rows(const LinParams& p,
                                                                std::int32_t* xr, std::int32_t* yr,
                                                                WPtrs& wp) {
  const std::int64_t t = blockIdx.y;
  if (t >= *p.tiles.tile_count) return false;
  const kernels::ExpertTile tile = p.tiles.tiles[t];
  for (int r = threadIdx.x; r < kBM; r += kThreads) {
    const std::int32_t m = r < tile.rows ? p.tiles.order[tile.first + r] : -1;
    xr[r] = m < 0 ? -1 : static_cast<std::int32_t>(m / p.x_div);
    yr[r] = m;
  }
  wp = expert_wptrs(p.w, tile.expert);
  __syncthreads();
  return true;
}

// Runs block(rows, wp) for this block's rows: rows blockIdx.y * 128 .. of a plain linear, or the
// grouped tile blockIdx.y (nothing for an empty tile).
template <bool Grouped, typename Block>
__device__ __forceinline__ void for_block_rows(const LinParams& p, Block&& block) {
  if constexpr (Grouped) {
    __shared__ std::int32_t xr[kBM], yr[kBM];
    WPtrs wp;
    if (load_tile_rows(p, xr, yr, wp)) block(TileRows{xr, yr}, wp);
  } else {
    block(PlainRows{static_cast<std::int64_t>(blockIdx.y) * kBM, p.m},
          WPtrs{p.w.w, p.w.scales, p.w.biases});
  }
}

#if defined(MLXCEL_GPU_CUDA)

// grid (ceil(n / 128), ceil(m / 128)), or (ceil(n / 128), max_tiles) for grouped expert rows.
// Launch bounds for two blocks per SM: one block's staging overlaps the other's mma (no
// pipelining inside a block yet); 128 registers, 0-56 bytes of spills in the dequant phase
// depending on the format (the mx / nv fp formats; the affine ones have none).
template <typename T, int F, typename Rows>
__device__ __forceinline__ void mma_block(const LinParams& p, const Rows& rows, const WPtrs& wp,
                                          unsigned char* smem) {
  Tiles<T>& sm = *reinterpret_cast<Tiles<T>*>(smem);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile origin: rows wm * 64, columns wn * 32
  const std::int64_t nb = static_cast<std::int64_t>(blockIdx.x) * kBN;
  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  for (std::int64_t k0 = 0; k0 < p.w.k; k0 += kBK) {
    stage_slice<T, F>(sm, p, rows, wp, nb, k0);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      // A: m tile i's four 8x8 quarters; B: two n tiles' (k 0-7, k 8-15) halves per ldmatrix.
      std::uint32_t a[4][4], b[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        ldmatrix_x4(a[i], &sm.x[wm * kWarpM + i * 16 + (lane & 15)][kk + (lane >> 4) * 8]);
#pragma unroll
      for (int j = 0; j < 2; ++j)
        ldmatrix_x4(b[j], &sm.w[wn * kWarpN + j * 16 + ((lane >> 4) << 3) + (lane & 7)]
                              [kk + ((lane >> 3) & 1) * 8]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mma<T>(acc[i][j], a[i], b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]);
    }
    __syncthreads();
  }
  // Accumulator (i, j): rows g and g + 8 of m tile i, columns 2q and 2q + 1 of n tile j; the
  // K loop's last barrier has passed, so the tile may overwrite the operands.
  const int g = lane / 4, q = lane % 4;
  T* tile = reinterpret_cast<T*>(smem);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int r = wm * kWarpM + i * 16 + g + h * 8, c = wn * kWarpN + j * 8 + 2 * q;
        const std::uint32_t pair =
            static_cast<std::uint32_t>(from_f32<T>(staged<T>(p, nb + c, acc[i][j][2 * h])).bits) |
            (static_cast<std::uint32_t>(
                 from_f32<T>(staged<T>(p, nb + c + 1, acc[i][j][2 * h + 1])).bits)
             << 16);
        *reinterpret_cast<std::uint32_t*>(&tile[r * kOutStride + c]) = pair;
      }
  __syncthreads();
  write_tile<T>(tile, p, rows, nb);
}

template <typename T, int F, bool Grouped>
__global__ void __launch_bounds__(kThreads, 2) gemm_mma_kernel(LinParams p) {
  wait_previous_kernel();
  // Raw storage: bf16 / f16 have member initializers, which __shared__ variables may not run.
  __shared__ __align__(16) unsigned char smem[sizeof(Tiles<T>)];
  for_block_rows<Grouped>(
      p, [&](const auto& rows, const WPtrs& wp) { mma_block<T, F>(p, rows, wp, smem); });
}

#else  // MLXCEL_GPU_HIP

typedef short v16s __attribute__((ext_vector_type(16)));
typedef _Float16 v16h __attribute__((ext_vector_type(16)));
typedef float v8f __attribute__((ext_vector_type(8)));

// 16 contiguous elements of a shared row as the WMMA operand vector of T.
template <typename T>
__device__ __forceinline__ auto load16(const T* p) {
  using V = std::conditional_t<std::is_same_v<T, bf16>, v16s, v16h>;
  V v;
  __builtin_memcpy(&v, p, sizeof(V));
  return v;
}

// RDNA3 wave32 WMMA: lane l (and l + 16, which holds the same operands) gives row l % 16 of A
// (16 k) and column l % 16 of B, i.e. row l % 16 of the weight tile; accumulator element e of
// lane l is C[2e + l / 16][l % 16].
template <typename T, int F, typename Rows>
__device__ __forceinline__ void wmma_block(const LinParams& p, const Rows& rows, const WPtrs& wp,
                                           unsigned char* smem) {
#if defined(__GFX11__)
  Tiles<T>& sm = *reinterpret_cast<Tiles<T>*>(smem);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, r16 = lane % 16;
  const int wm = warp / 4, wn = warp % 4;  // wave tile origin: rows wm * 64, columns wn * 32
  const std::int64_t nb = static_cast<std::int64_t>(blockIdx.x) * kBN;
  v8f acc[4][2];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) acc[i][j] = v8f{};

  for (std::int64_t k0 = 0; k0 < p.w.k; k0 += kBK) {
    stage_slice<T, F>(sm, p, rows, wp, nb, k0);
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      decltype(load16(&sm.x[0][0])) a[4], b[2];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = load16(&sm.x[wm * kWarpM + i * 16 + r16][kk]);
#pragma unroll
      for (int j = 0; j < 2; ++j) b[j] = load16(&sm.w[wn * kWarpN + j * 16 + r16][kk]);
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          if constexpr (std::is_same_v<T, bf16>)
            acc[i][j] = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a[i], b[j], acc[i][j]);
          else
            acc[i][j] = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a[i], b[j], acc[i][j]);
        }
    }
    __syncthreads();
  }
  // The K loop's last barrier has passed: the tile may overwrite the operands.
  T* tile = reinterpret_cast<T*>(smem);
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int r = wm * kWarpM + i * 16 + 2 * e + lane / 16, c = wn * kWarpN + j * 16 + r16;
        tile[r * kOutStride + c] = from_f32<T>(staged<T>(p, nb + c, acc[i][j][e]));
      }
  __syncthreads();
  write_tile<T>(tile, p, rows, nb);
#else
  (void)p;
  (void)rows;
  (void)wp;
  (void)smem;
#endif
}

// grid (ceil(n / 128), ceil(m / 128)), or (ceil(n / 128), max_tiles) for grouped expert rows.
template <typename T, int F, bool Grouped>
__global__ void __launch_bounds__(kThreads) gemm_wmma_kernel(LinParams p) {
  wait_previous_kernel();
#if defined(__GFX11__)
  // Raw storage: bf16 / f16 have member initializers, which __shared__ variables may not run.
  __shared__ __align__(16) unsigned char smem[sizeof(Tiles<T>)];
  for_block_rows<Grouped>(
      p, [&](const auto& rows, const WPtrs& wp) { wmma_block<T, F>(p, rows, wp, smem); });
#else
  (void)p;
  __builtin_trap();  // the host launches this only on gfx11 devices (wmma_capable)
#endif
}

#endif

}  // namespace

template <typename T, int F>
bool gemm_mma(const LinParams& p, const Stream& s) {
  constexpr bool act_ok = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;
  // Dense weights only in the activation dtype: rounding fp32 or other-dtype weights would change
  // a dense model's numbers.
  constexpr bool w_ok = !fmt_dense(F) || (F == kDenseBf16 && std::is_same_v<T, bf16>) ||
                        (F == kDenseF16 && std::is_same_v<T, f16>);
  if constexpr (!act_ok || !w_ok) {
    return false;
  } else {
#if defined(MLXCEL_GPU_CUDA)
    static const bool on = env_int("MLXCEL_GPU_GEMM_MMA", 1) != 0;
#else
    static const bool on = env_int("MLXCEL_GPU_GEMM_MMA", 0) != 0;
#endif
    const bool grouped = p.experts != nullptr;
    if (!on || (grouped && !p.tiles.order)) return false;
#if defined(MLXCEL_GPU_CUDA)
    if (!mma_capable(s.device())) return false;
#else
    if (!wmma_capable(s.device())) return false;
#endif
    // 16-byte X loads per 8 elements and whole K slices of units.
    const bool aligned = reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 &&
                         (p.x_stride * static_cast<std::int64_t>(sizeof(T))) % 16 == 0 &&
                         p.w.k % 32 == 0;
    if (!aligned) return false;
    constexpr std::int64_t kMaxGridY = 65535;
    const std::int64_t row_blocks = grouped ? p.tiles.max_tiles : (p.m + kBM - 1) / kBM;
    if (row_blocks > kMaxGridY) return false;
    const dim3 grid(blocks_for(p.w.n, kBN), static_cast<unsigned>(row_blocks));
#if defined(MLXCEL_GPU_CUDA)
    if (grouped)
      launch_kernel(gemm_mma_kernel<T, F, true>, grid, kThreads, 0, s, p);
    else
      launch_kernel(gemm_mma_kernel<T, F, false>, grid, kThreads, 0, s, p);
#else
    if (grouped)
      launch_kernel(gemm_wmma_kernel<T, F, true>, grid, kThreads, 0, s, p);
    else
      launch_kernel(gemm_wmma_kernel<T, F, false>, grid, kThreads, 0, s, p);
#endif
    return true;
  }
}

// Every (activation dtype, weight format) linear.cu instantiates.
#define MLXCEL_GEMM_MMA_FMT(F)                                           \
  template bool gemm_mma<float, F>(const LinParams&, const Stream&);     \
  template bool gemm_mma<bf16, F>(const LinParams&, const Stream&);      \
  template bool gemm_mma<f16, F>(const LinParams&, const Stream&);
MLXCEL_GEMM_MMA_FMT(kDenseF32)
MLXCEL_GEMM_MMA_FMT(kDenseF16)
MLXCEL_GEMM_MMA_FMT(kDenseBf16)
MLXCEL_GEMM_MMA_FMT(kAffine2)
MLXCEL_GEMM_MMA_FMT(kAffine3)
MLXCEL_GEMM_MMA_FMT(kAffine4)
MLXCEL_GEMM_MMA_FMT(kAffine5)
MLXCEL_GEMM_MMA_FMT(kAffine6)
MLXCEL_GEMM_MMA_FMT(kAffine8)
MLXCEL_GEMM_MMA_FMT(kMxfp4)
MLXCEL_GEMM_MMA_FMT(kMxfp8)
MLXCEL_GEMM_MMA_FMT(kNvfp4)
#undef MLXCEL_GEMM_MMA_FMT

}  // namespace mlxcel::gpu
