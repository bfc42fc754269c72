#include "backend/cpu/rms_norm.h"

#include <cmath>
#include <string>

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

}  // namespace

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
