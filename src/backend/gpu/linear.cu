// Linear y = round(x · Wᵀ + bias) for every weight format, dequantizing in-kernel with fp32
// accumulation. Few rows (decode, M <= 8, and expert-indexed MoE rows): a GEMV with one warp per
// output column that streams each weight once for all rows. More rows (prefill): a 64x64 tiled
// GEMM over 32-wide K slices staged through shared memory. Same source for CUDA and HIP.
#include <algorithm>
#include <string>

#include "backend/gpu/common.cuh"
#include "backend/gpu/kernels.h"
#include "backend/gpu/reduce.cuh"

namespace mlxcel::gpu {
namespace {

constexpr int kGemvWarps = 4;
constexpr int kGemvRows = 8;  // activation rows per GEMV block (decode batch)
constexpr int kTile = 64, kThreads = 256;

struct LinParams {
  const void* x = nullptr;
  std::int64_t x_stride = 0, x_div = 1;
  WView w;
  const std::int32_t* experts = nullptr;
  const float* bias = nullptr;
  void* y = nullptr;
  std::int64_t y_stride = 0, m = 0;
  std::int64_t row_block0 = 0;  // GEMV: the first row block of this launch (grid.y <= 65,535)
  int round = 0;
};

// Weight pointers of the matrix row m uses (its expert's, for expert-indexed rows).
struct WPtrs {
  const void* w;
  const void* scales;
  const void* biases;
};
__device__ __forceinline__ WPtrs wptrs(const LinParams& p, std::int64_t m) {
  WPtrs r{p.w.w, p.w.scales, p.w.biases};
  if (p.experts) {
    const std::int64_t e = p.experts[m];
    r.w = static_cast<const char*>(r.w) + e * p.w.expert_stride_w;
    if (r.scales) r.scales = static_cast<const char*>(r.scales) + e * p.w.expert_stride_s;
    if (r.biases) r.biases = static_cast<const char*>(r.biases) + e * p.w.expert_stride_s;
  }
  return r;
}

// grid (ceil(n / kGemvWarps), ceil(m / rows_per_block)); warp w of a block computes column n for
// up to kGemvRows rows (1 row when rows are expert-indexed: each may use another matrix).
template <typename T, int F>
__global__ void gemv_kernel(LinParams p) {
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
    decode_unit<F>(wp.w, wp.scales, wp.biases, p.w.scales_code, p.w.group_size, k, n, u, v);
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
  const float b = p.bias ? p.bias[n] : 0.0f;
  T* y = static_cast<T*>(p.y);
#pragma unroll
  for (int i = 0; i < kGemvRows; ++i) {
    if (i < mc) {
      const float s = warp_sum(acc[i]);
      if (lane == 0) store(y, (m0 + i) * p.y_stride + n, s + b, p.round);
    }
  }
}

// grid (ceil(n / 64), ceil(m / 64)), 256 threads, each 4x4 outputs. Per 32-wide K slice, the X
// tile is staged as fp32 and 64 threads dequantize one weight unit each into shared memory.
template <typename T, int F>
__global__ void gemm_kernel(LinParams p) {
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
        decode_unit<F>(p.w.w, p.w.scales, p.w.biases, p.w.scales_code, p.w.group_size, k, n, u, v);
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
  T* y = static_cast<T*>(p.y);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const std::int64_t m = mb + tm * 4 + i;
    if (m >= p.m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::int64_t n = nb + tn + 16 * j;
      if (n < p.w.n) store(y, m * p.y_stride + n, acc[i][j] + (p.bias ? p.bias[n] : 0.0f), p.round);
    }
  }
}

template <typename T, int F>
void launch(const LinParams& p, bool gemm, const Stream& s) {
  auto st = static_cast<gpuStream_t>(s.handle());
  if (gemm) {
    dim3 grid(blocks_for(p.w.n, kTile), blocks_for(p.m, kTile));
    gemm_kernel<T, F><<<grid, kThreads, 0, st>>>(p);
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
      gemv_kernel<T, F><<<grid, kGemvWarps * MLXCEL_WARP_SIZE, 0, st>>>(q);
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

void linear_experts(const ExpertLinear& a, const Stream& s) {
  const backend::Matrix& m = a.w;
  const std::int64_t rows = a.y.rows;
  if (rows <= 0 || m.n == 0) return;
  const int fmt = wfmt_of(m.mode, m.w_dtype, m.bits, m.group_size, m.scales_dtype);
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
  LinParams p;
  p.x = a.x.data;
  p.x_stride = a.x.stride;
  p.x_div = a.x_div;
  p.w = wview(m);
  p.experts = a.experts;
  p.bias = a.bias;
  p.y = a.y.data;
  p.y_stride = a.y.stride;
  p.m = rows;
  p.round = round_code(a.round);
  const bool gemm = !a.experts && rows > kGemvRows;
  dispatch_act(a.x.dtype, "linear", [&](auto tag) {
    using T = decltype(tag);
    launch_fmt<T>(fmt, p, gemm, s);
  });
  check_launch("linear", s.device());
}

void linear(const backend::LinearArgs& a, const Stream& s) {
  ExpertLinear e;
  e.x = a.x;
  e.w = a.w;
  e.bias = a.bias;
  e.y = a.y;
  e.round = a.round;
  linear_experts(e, s);
}

}  // namespace kernels
}  // namespace mlxcel::gpu
