// RMSNorm and fused add+RMSNorm: one block per row, fp32 accumulation, warp/wave butterfly
// reduction then a shared-memory pass across warps. Same source for CUDA and HIP.
#include <string>
#include <type_traits>

#include "backend/gpu/common.cuh"
#include "backend/gpu/compat.h"
#include "backend/gpu/kernels.h"
#include "backend/gpu/reduce.cuh"
#include "backend/gpu/rms_norm.h"

namespace mlxcel::gpu {
namespace {

constexpr int kBlock = 256;  // a multiple of 64 so wave64 targets also fill whole waves

template <typename T>
__global__ void rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
                                std::int64_t cols, std::int64_t stride, float eps) {
  wait_previous_kernel();
  const std::int64_t row = blockIdx.x;
  const T* xr = x + row * stride;
  float ss = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = to_f32(xr[c]);
    ss += v * v;
  }
  ss = block_sum<kBlock>(ss);
  const float inv = rsqrtf(ss / static_cast<float>(cols) + eps);
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[row * cols + c] = from_f32<T>(to_f32(xr[c]) * inv * to_f32(w[c]));
  }
}

template <typename T>
__global__ void add_rms_norm_kernel(const T* __restrict__ x, const T* __restrict__ res,
                                    const T* __restrict__ w, T* __restrict__ y,
                                    T* __restrict__ res_out, std::int64_t cols, float eps) {
  wait_previous_kernel();
  const std::int64_t base = static_cast<std::int64_t>(blockIdx.x) * cols;
  float ss = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    // Round the sum to T first so the result equals the unfused add followed by rms_norm.
    T h = from_f32<T>(to_f32(x[base + c]) + to_f32(res[base + c]));
    res_out[base + c] = h;
    float v = to_f32(h);
    ss += v * v;
  }
  ss = block_sum<kBlock>(ss);
  const float inv = rsqrtf(ss / static_cast<float>(cols) + eps);
  // Each thread re-reads only the elements it wrote itself, so no barrier is needed.
  for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    y[base + c] = from_f32<T>(to_f32(res_out[base + c]) * inv * to_f32(w[c]));
  }
}

template <typename T>
void launch_rms(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
                std::int64_t stride, float eps, const Stream& s) {
  launch_kernel(rms_norm_kernel<T>, static_cast<unsigned>(rows), kBlock, 0, s,
      static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), cols, stride, eps);
  GPU_CHECK(gpuGetLastError(), "rms_norm launch", s.device());
}

template <typename T>
void launch_add_rms(const void* x, const void* r, const void* w, void* y, void* ro,
                    std::int64_t rows, std::int64_t cols, float eps, const Stream& s) {
  launch_kernel(add_rms_norm_kernel<T>, static_cast<unsigned>(rows), kBlock, 0, s,
      static_cast<const T*>(x), static_cast<const T*>(r), static_cast<const T*>(w),
      static_cast<T*>(y), static_cast<T*>(ro), cols, eps);
  GPU_CHECK(gpuGetLastError(), "add_rms_norm launch", s.device());
}

[[noreturn]] void bad_dtype(const char* op, DType dtype) {
  throw_error(ErrorCategory::kUnsupported, std::string(op) + ": dtype " +
                                               std::string(dtype_name(dtype)) +
                                               " on the GPU (use F32, BF16 or F16)");
}

}  // namespace

void rms_norm(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
              std::int64_t x_row_stride, float eps, DType dtype, const Stream& s) {
  if (rows == 0 || cols == 0) return;
  switch (dtype) {
    case DType::kF32:
      return launch_rms<float>(x, w, y, rows, cols, x_row_stride, eps, s);
    case DType::kBF16:
      return launch_rms<bf16>(x, w, y, rows, cols, x_row_stride, eps, s);
    case DType::kF16:
      return launch_rms<f16>(x, w, y, rows, cols, x_row_stride, eps, s);
    default:
      bad_dtype("rms_norm", dtype);
  }
}

void add_rms_norm(const void* x, const void* residual, const void* w, void* y, void* residual_out,
                  std::int64_t rows, std::int64_t cols, float eps, DType dtype, const Stream& s) {
  if (rows == 0 || cols == 0) return;
  switch (dtype) {
    case DType::kF32:
      return launch_add_rms<float>(x, residual, w, y, residual_out, rows, cols, eps, s);
    case DType::kBF16:
      return launch_add_rms<bf16>(x, residual, w, y, residual_out, rows, cols, eps, s);
    case DType::kF16:
      return launch_add_rms<f16>(x, residual, w, y, residual_out, rows, cols, eps, s);
    default:
      bad_dtype("add_rms_norm", dtype);
  }
}

}  // namespace mlxcel::gpu

// --- Op-layer forms (backend::RmsNormArgs / AddRmsNormArgs) -----------------------------------
// Strided rows, `heads` slices per row (qk-norm), an fp32 weight and the op's rounding, with the
// CPU backend's semantics: y = round(round(x * r) * w) for half activations, x * r * w for F32.
namespace mlxcel::gpu {
namespace {

// A thread keeps its first kHeld elements of the row in registers between the sum of squares and
// the scaling (loaded unconditionally from a clamped index, so all are in flight at once); rows
// longer than kHeld * B continue in a loop. The rolled loops these replace waited one memory round
// trip per element: 15 us for one 4096-wide row on the H200 (run 16). B = 256 threads per row up
// to 2,048 columns, else 1,024 (a 4096-wide row in 4 loads per thread).
constexpr int kHeld = 8;

template <typename F>
void with_block(std::int64_t cols, F&& f) {
  if (cols <= 2048) {
    f(std::integral_constant<int, 256>{});
  } else {
    f(std::integral_constant<int, 1024>{});
  }
}

template <typename T, int B>
__global__ void __launch_bounds__(B) rms_norm_act_kernel(const T* x, std::int64_t x_stride,
                                                         const float* w, T* y,
                                                         std::int64_t y_stride, std::int64_t heads,
                                                         std::int64_t hd, float eps, int round) {
  wait_previous_kernel();
  const std::int64_t row = blockIdx.x / heads, h = blockIdx.x % heads;
  const T* xr = x + row * x_stride + h * hd;
  T* yr = y + row * y_stride + h * hd;
  float v[kHeld], wv[kHeld];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(i) * B;
    const float e = to_f32(xr[c < hd ? c : hd - 1]);
    wv[i] = w[c < hd ? c : hd - 1];  // in flight with x, not after the reduction
    v[i] = c < hd ? e : 0.0f;
    ss = fmaf(v[i], v[i], ss);
  }
  for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(kHeld) * B; c < hd; c += B) {
    const float e = to_f32(xr[c]);
    ss = fmaf(e, e, ss);
  }
  ss = block_sum<B>(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(hd) + eps);
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(i) * B;
    if (c < hd) store(yr, c, rnd(v[i] * inv, round) * wv[i], round);
  }
  for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(kHeld) * B; c < hd; c += B)
    store(yr, c, rnd(to_f32(xr[c]) * inv, round) * w[c], round);
}

template <typename T, int B>
__global__ void __launch_bounds__(B)
    add_rms_norm_act_kernel(T* h, std::int64_t h_stride, const T* d, std::int64_t d_stride,
                            const float* w, T* y, std::int64_t y_stride, std::int64_t cols,
                            float eps, int round) {
  wait_previous_kernel();
  const std::int64_t row = blockIdx.x;
  T* hr = h + row * h_stride;
  const T* dr = d + row * d_stride;
  T* yr = y + row * y_stride;
  float v[kHeld], wv[kHeld];
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(i) * B;
    const std::int64_t cc = c < cols ? c : cols - 1;
    wv[i] = w[cc];  // in flight with h and d (h and w mostly come from DRAM: the GEMVs
                    // between two norms stream enough weights through L2 to evict them)
    // The stored (rounded) sum is what the norm sees, as in the unfused add then rms_norm.
    const T sum = from_f32<T>(rnd(to_f32(hr[cc]) + to_f32(dr[cc]), round));
    v[i] = c < cols ? to_f32(sum) : 0.0f;
    if (c < cols) hr[c] = sum;
    ss = fmaf(v[i], v[i], ss);
  }
  for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(kHeld) * B; c < cols; c += B) {
    const T sum = from_f32<T>(rnd(to_f32(hr[c]) + to_f32(dr[c]), round));
    hr[c] = sum;
    const float e = to_f32(sum);
    ss = fmaf(e, e, ss);
  }
  ss = block_sum<B>(ss);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(cols) + eps);
#pragma unroll
  for (int i = 0; i < kHeld; ++i) {
    const std::int64_t c = threadIdx.x + static_cast<std::int64_t>(i) * B;
    if (c < cols) store(yr, c, rnd(v[i] * inv, round) * wv[i], round);
  }
  // Each thread re-reads only the elements it wrote itself.
  for (std::int64_t c = threadIdx.x + static_cast<std::int64_t>(kHeld) * B; c < cols; c += B)
    store(yr, c, rnd(to_f32(hr[c]) * inv, round) * w[c], round);
}

}  // namespace

namespace kernels {

void rms_norm(const backend::RmsNormArgs& a, const Stream& s) {
  const std::int64_t rows = a.x.rows, heads = a.heads > 0 ? a.heads : 1;
  if (rows == 0 || a.x.cols == 0) return;
  MLXCEL_CHECK(a.x.dtype == a.y.dtype && a.x.cols % heads == 0, ErrorCategory::kInternal,
               "gpu rms_norm: dtype or heads mismatch");
  dispatch_act(a.x.dtype, "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    with_block(a.x.cols / heads, [&](auto bt) {
      constexpr int B = decltype(bt)::value;
      launch_kernel(rms_norm_act_kernel<T, B>, static_cast<unsigned>(rows * heads), B, 0, s,
          static_cast<const T*>(a.x.data), a.x.stride, a.weight, static_cast<T*>(a.y.data),
          a.y.stride, heads, a.x.cols / heads, a.eps, round_code(a.round));
    });
  });
  check_launch("rms_norm", s.device());
}

void add_rms_norm(const backend::AddRmsNormArgs& a, const Stream& s) {
  const std::int64_t rows = a.h.rows;
  if (rows == 0 || a.h.cols == 0) return;
  MLXCEL_CHECK(a.h.dtype == a.delta.dtype && a.h.dtype == a.y.dtype, ErrorCategory::kInternal,
               "gpu add_rms_norm: dtypes differ");
  dispatch_act(a.h.dtype, "add_rms_norm", [&](auto tag) {
    using T = decltype(tag);
    with_block(a.h.cols, [&](auto bt) {
      constexpr int B = decltype(bt)::value;
      launch_kernel(add_rms_norm_act_kernel<T, B>, static_cast<unsigned>(rows), B, 0, s,
          static_cast<T*>(a.h.data), a.h.stride, static_cast<const T*>(a.delta.data),
          a.delta.stride, a.weight, static_cast<T*>(a.y.data), a.y.stride, a.h.cols, a.eps,
          round_code(a.round));
    });
  });
  check_launch("add_rms_norm", s.device());
}

}  // namespace kernels
}  // namespace mlxcel::gpu
