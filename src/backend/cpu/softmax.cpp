#include "backend/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu {
namespace {

void validate(const SoftmaxArgs& a) {
  MLXCEL_CHECK(a.rows >= 0 && a.cols >= 0 && a.x && a.y, ErrorCategory::kInternal,
               "softmax: bad arguments");
  if (!detail::is_activation_dtype(a.dtype)) detail::unsupported_dtype("softmax", a.dtype);
}

// One row on f32 scratch s (already masked): s <- softmax(s).
void softmax_row_scalar(float* s, std::int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) mx = std::max(mx, s[i]);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(s, s + n, 0.0f);
    return;
  }
  // Eight partial sums: the rounding of the total grows like sqrt(n), not n.
  float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (std::int64_t i = 0; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    part[i & 7] += s[i];
  }
  const float sum = ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
  const float inv = 1.0f / sum;
  for (std::int64_t i = 0; i < n; ++i) s[i] *= inv;
}

void softmax_row_avx2(float* s, std::int64_t n) {
  const float mx = avx2::max_f32(s, n);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(s, s + n, 0.0f);
    return;
  }
  const float sum = avx2::exp_sub_sum_f32(s, mx, s, n);
  avx2::scale_f32(1.0f / sum, s, n);
}

}  // namespace

void softmax_ref(const SoftmaxArgs& a) {
  validate(a);
  const std::int64_t xs = a.x_row_stride ? a.x_row_stride : a.cols;
  const std::int64_t ys = a.y_row_stride ? a.y_row_stride : a.cols;
  const std::size_t es = dtype_size(a.dtype);
  std::vector<float> s(static_cast<std::size_t>(a.cols));
  std::vector<double> e(static_cast<std::size_t>(a.cols));
  for (std::int64_t r = 0; r < a.rows; ++r) {
    detail::load_f32(static_cast<const char*>(a.x) + r * xs * es, a.dtype, s.data(), a.cols);
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t c = 0; c < a.cols; ++c) {
      if (a.mask) s[c] += a.mask[r * a.mask_row_stride + c];
      mx = std::max(mx, static_cast<double>(s[c]));
    }
    double sum = 0.0;
    for (std::int64_t c = 0; c < a.cols; ++c) {
      e[c] = std::isinf(mx) && mx < 0 ? 0.0 : std::exp(static_cast<double>(s[c]) - mx);
      sum += e[c];
    }
    for (std::int64_t c = 0; c < a.cols; ++c) s[c] = sum > 0 ? static_cast<float>(e[c] / sum) : 0.0f;
    detail::store_f32(s.data(), a.dtype, static_cast<char*>(a.y) + r * ys * es, a.cols);
  }
}

void softmax(const SoftmaxArgs& a, CpuIsa isa, ThreadPool* pool) {
  validate(a);
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               "softmax: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  const std::int64_t xs = a.x_row_stride ? a.x_row_stride : a.cols;
  const std::int64_t ys = a.y_row_stride ? a.y_row_stride : a.cols;
  const std::size_t es = dtype_size(a.dtype);
  const bool v = isa == CpuIsa::kAvx2;
  const std::int64_t grain = std::max<std::int64_t>(1, 8192 / std::max<std::int64_t>(a.cols, 1));
  pool_or_default(pool).parallel_for(a.rows, grain, [&](std::int64_t r0, std::int64_t r1) {
    std::vector<float> s(static_cast<std::size_t>(a.cols));
    for (std::int64_t r = r0; r < r1; ++r) {
      const void* src = static_cast<const char*>(a.x) + r * xs * es;
      if (v) avx2::convert_to_f32(src, a.dtype, s.data(), a.cols);
      else detail::load_f32(src, a.dtype, s.data(), a.cols);
      if (a.mask) {
        const float* m = a.mask + r * a.mask_row_stride;
        for (std::int64_t c = 0; c < a.cols; ++c) s[c] += m[c];
      }
      if (v) softmax_row_avx2(s.data(), a.cols);
      else softmax_row_scalar(s.data(), a.cols);
      void* dst = static_cast<char*>(a.y) + r * ys * es;
      if (v) avx2::convert_from_f32(s.data(), a.dtype, dst, a.cols);
      else detail::store_f32(s.data(), a.dtype, dst, a.cols);
    }
  });
}

}  // namespace mlxcel::cpu
