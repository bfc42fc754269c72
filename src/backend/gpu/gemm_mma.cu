// Prefill linears (more than 64 rows) on the tensor cores: mma.sync m16n8k16, CUDA sm_80+, bf16 /
// f16 activations, every quantized weight format and dense weights of the activation dtype.
//
// Why: the SIMT gemm_kernel (linear.cu) multiplies in fp32 FMAs, ~1.5 TFLOP/s on the H200: 83 ms
// for the 8B's gate_up over a 512-token prompt (run 22), and pp512 at 1,356 tok/s against
// llama.cpp's 10,704. The matrix units do the same products at hundreds of TFLOP/s.
//
// Shape: a block computes a 128 (rows) x 128 (output columns) tile with 8 warps of 64 x 32, over
// K slices of 64 (two 32-weight units). Per slice the block stages its X rows (16-byte loads) and
// its 128 weight columns, dequantized by decode_unit into the activation dtype (what MLX's own
// quantized matmuls multiply), in shared memory; the warps read both with ldmatrix and issue 16
// mma per 16 k. Row strides are 72 elements (144 bytes) so the 8 rows of each ldmatrix fall in
// distinct banks.
//
// Numerics: products of the rounded weights accumulate in fp32 in the mma's order, so results
// differ from the SIMT kernel's fp32 weights by about one rounding of each weight; both are
// checked against the CPU by test_backend_ops. The decode path (<= 64 rows) never comes here,
// so decode stays batch invariant.
//
// Not yet run on a GPU (written in session 9 without a device): off unless MLXCEL_GPU_GEMM_MMA=1.
#include <cstdint>
#include <type_traits>

#include "backend/gpu/linear.cuh"
#include "backend/gpu/mma.cuh"

namespace mlxcel::gpu {

#if defined(MLXCEL_GPU_CUDA)
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 64;  // block tile and K slice
constexpr int kWarpM = 64, kWarpN = 32;        // warp tile: 4 x 4 mma tiles of 16 x 8
constexpr int kThreads = 256;                  // 2 x 4 warps
constexpr int kStride = kBK + 8;               // shared row stride in elements (144 bytes)

template <typename T>
struct Tiles {
  T x[kBM][kStride];
  T w[kBN][kStride];
};

// Eight fp32 values rounded to T (nearest even, one cvt per pair on sm_80+), as four 32-bit
// words with element 2i in the low half of word i.
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
#else
    w[i] = static_cast<std::uint32_t>(from_f32<T>(v[2 * i]).bits) |
           (static_cast<std::uint32_t>(from_f32<T>(v[2 * i + 1]).bits) << 16);
#endif
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// grid (ceil(n / 128), ceil(m / 128)).
template <typename T, int F>
__global__ void __launch_bounds__(kThreads, 2) gemm_mma_kernel(LinParams p) {
  __shared__ __align__(16) Tiles<T> sm;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile origin: rows wm * 64, columns wn * 32
  const std::int64_t mb = static_cast<std::int64_t>(blockIdx.y) * kBM;
  const std::int64_t nb = static_cast<std::int64_t>(blockIdx.x) * kBN;
  const std::int64_t k = p.w.k, units = k / 32;
  const T* x = static_cast<const T*>(p.x);

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  for (std::int64_t k0 = 0; k0 < k; k0 += kBK) {
    // X: 128 rows x 64 elements = 1,024 16-byte chunks, 4 per thread (zero past m or k).
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int idx = tid + i * kThreads, r = idx / 8, c = (idx % 8) * 8;
      const std::int64_t m = mb + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (m < p.m && k0 + c < k) v = *reinterpret_cast<const uint4*>(x + m * p.x_stride + k0 + c);
      *reinterpret_cast<uint4*>(&sm.x[r][c]) = v;
    }
    // W: thread t dequantizes unit t / 128 of the slice for column t % 128.
    {
      const int col = tid % kBN, half = tid / kBN;
      const std::int64_t n = nb + col, u = k0 / 32 + half;
      float v[32];
      if (n < p.w.n && u < units) {
        decode_unit<F>(p.w.w, p.w.scales, p.w.biases, p.w.scales_code, p.w.group_size, k, n, u,
                       v);
      } else {
#pragma unroll
        for (int j = 0; j < 32; ++j) v[j] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j)
        *reinterpret_cast<uint4*>(&sm.w[col][half * 32 + j * 8]) = pack8<T>(v + j * 8);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
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
        for (int j = 0; j < 4; ++j) mma<T>(acc[i][j], a[i], b[j / 2][2 * (j % 2)], b[j / 2][2 * (j % 2) + 1]);
    }
    __syncthreads();
  }

  // Accumulator (i, j): rows +g and +g + 8 of m tile i, columns 2q, 2q + 1 of n tile j.
  T* y = static_cast<T*>(p.y);
  const int g = lane / 4, q = lane % 4;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const std::int64_t m = mb + wm * kWarpM + i * 16 + g + h * 8;
      if (m >= p.m) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const std::int64_t n = nb + wn * kWarpN + j * 8 + 2 * q + e;
          if (n < p.w.n)
            store(y, m * p.y_stride + n, acc[i][j][2 * h + e] + (p.bias ? p.bias[n] : 0.0f),
                  p.round);
        }
      }
    }
  }
}

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
    static const bool on = env_int("MLXCEL_GPU_GEMM_MMA", 0) != 0;
    if (!on || p.experts || !mma_capable(s.device())) return false;
    // 16-byte X loads per 8 elements and whole K slices of units.
    const bool aligned = reinterpret_cast<std::uintptr_t>(p.x) % 16 == 0 &&
                         (p.x_stride * static_cast<std::int64_t>(sizeof(T))) % 16 == 0 &&
                         p.w.k % 32 == 0;
    if (!aligned) return false;
    constexpr std::int64_t kMaxGridY = 65535;
    const std::int64_t row_blocks = (p.m + kBM - 1) / kBM;
    if (row_blocks > kMaxGridY) return false;
    const dim3 grid(blocks_for(p.w.n, kBN), static_cast<unsigned>(row_blocks));
    gemm_mma_kernel<T, F><<<grid, kThreads, 0, static_cast<gpuStream_t>(s.handle())>>>(p);
    return true;
  }
}

#else  // MLXCEL_GPU_HIP: no mma.sync; the SIMT gemm_kernel serves (WMMA for RDNA3 is not written).

template <typename T, int F>
bool gemm_mma(const LinParams&, const Stream&) {
  return false;
}

#endif

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
