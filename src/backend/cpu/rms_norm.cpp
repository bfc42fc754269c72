#include "backend/cpu/rms_norm.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/kernel_util.h"
#include "core/error.h"

namespace mlxcel::cpu {
namespace {

template <typename T>
void rms_norm_t(const T* x, const T* w, T* y, std::int64_t rows, std::int64_t cols,
                std::int64_t stride, float eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * stride;
    double ss = 0.0;  // reference: accumulate in double, the GPU's fp32 tree is within bound
    for (std::int64_t c = 0; c < cols; ++c) {
      float v = to_f32(xr[c]);
      ss += static_cast<double>(v) * v;
    }
    float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(cols)) + eps);
    for (std::int64_t c = 0; c < cols; ++c) {
      y[r * cols + c] = from_f32<T>(to_f32(xr[c]) * inv * to_f32(w[c]));
    }
  }
}

template <typename T>
void add_rms_norm_t(const T* x, const T* res, const T* w, T* y, T* res_out, std::int64_t rows,
                    std::int64_t cols, float eps) {
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    res_out[i] = from_f32<T>(to_f32(x[i]) + to_f32(res[i]));
  }
  rms_norm_t(res_out, w, y, rows, cols, cols, eps);
}

template <typename T>
void rms_norm_row_scalar(const T* x, const T* w, T* y, std::int64_t cols, float eps) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t c = 0;
  for (; c + 8 <= cols; c += 8) {
    for (int j = 0; j < 8; ++j) {
      float v = to_f32(x[c + j]);
      acc[j] += v * v;
    }
  }
  float ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; c < cols; ++c) ss += to_f32(x[c]) * to_f32(x[c]);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + eps);
  for (c = 0; c < cols; ++c) y[c] = from_f32<T>(to_f32(x[c]) * inv * to_f32(w[c]));
}

}  // namespace

void rms_norm(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
              std::int64_t x_row_stride, float eps, DType dtype, CpuIsa isa, ThreadPool* pool) {
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               "rms_norm: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  if (!detail::is_activation_dtype(dtype)) detail::unsupported_dtype("rms_norm", dtype);
  const std::size_t es = dtype_size(dtype);
  const std::int64_t grain = std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(cols, 1));
  pool_or_default(pool).parallel_for(rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const void* xr = static_cast<const char*>(x) + r * x_row_stride * es;
      void* yr = static_cast<char*>(y) + r * cols * es;
      if (isa == CpuIsa::kAvx2) {
        avx2::rms_norm_row(xr, w, yr, dtype, cols, eps);
      } else {
        detail::dispatch_float("rms_norm", dtype, [&](auto tag) {
          using T = decltype(tag);
          rms_norm_row_scalar(static_cast<const T*>(xr), static_cast<const T*>(w),
                              static_cast<T*>(yr), cols, eps);
        });
      }
    }
  });
}

void add_rms_norm(const void* x, const void* residual, const void* w, void* y,
                  void* residual_out, std::int64_t rows, std::int64_t cols, float eps,
                  DType dtype, CpuIsa isa, ThreadPool* pool) {
  binary(BinaryKind::kAdd, x, residual, residual_out, dtype, rows * cols, 1.0f, isa, pool);
  rms_norm(residual_out, w, y, rows, cols, cols, eps, dtype, isa, pool);
}

void rms_norm_ref(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
                  std::int64_t x_row_stride, float eps, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return rms_norm_t(static_cast<const float*>(x), static_cast<const float*>(w),
                        static_cast<float*>(y), rows, cols, x_row_stride, eps);
    case DType::kBF16:
      return rms_norm_t(static_cast<const bf16*>(x), static_cast<const bf16*>(w),
                        static_cast<bf16*>(y), rows, cols, x_row_stride, eps);
    case DType::kF16:
      return rms_norm_t(static_cast<const f16*>(x), static_cast<const f16*>(w),
                        static_cast<f16*>(y), rows, cols, x_row_stride, eps);
    default:
      throw_error(ErrorCategory::kUnsupported,
                  "rms_norm: dtype " + std::string(dtype_name(dtype)) + " (use F32, BF16 or F16)");
  }
}

void add_rms_norm_ref(const void* x, const void* residual, const void* w, void* y,
                      void* residual_out, std::int64_t rows, std::int64_t cols, float eps,
                      DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return add_rms_norm_t(static_cast<const float*>(x), static_cast<const float*>(residual),
                            static_cast<const float*>(w), static_cast<float*>(y),
                            static_cast<float*>(residual_out), rows, cols, eps);
    case DType::kBF16:
      return add_rms_norm_t(static_cast<const bf16*>(x), static_cast<const bf16*>(residual),
                            static_cast<const bf16*>(w), static_cast<bf16*>(y),
                            static_cast<bf16*>(residual_out), rows, cols, eps);
    case DType::kF16:
      return add_rms_norm_t(static_cast<const f16*>(x), static_cast<const f16*>(residual),
                            static_cast<const f16*>(w), static_cast<f16*>(y),
                            static_cast<f16*>(residual_out), rows, cols, eps);
    default:
      throw_error(ErrorCategory::kUnsupported,
                  "add_rms_norm: dtype " + std::string(dtype_name(dtype)) +
                      " (use F32, BF16 or F16)");
  }
}

}  // namespace mlxcel::cpu
