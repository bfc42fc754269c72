#include "backend/cpu/matmul.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/kernel_util.h"
#include "core/error.h"

namespace mlxcel::cpu {
namespace {

// Blocking. The GEMM packs a chunk of kNc weight rows x kKc columns into f32, laid out k-major
// ([kKc][kNc]) so that the 6x16 register tile reads 16 consecutive outputs per k step; one
// x row element is broadcast per row of the tile. 256 x 64 x 4 B = 64 KiB: stays in L2 while
// every 6-row tile of x passes over it.
constexpr std::int64_t kKc = 256;
constexpr std::int64_t kNc = 64;
constexpr std::int64_t kMr = 6;
constexpr std::int64_t kNr = 16;
constexpr std::int64_t kGemvMaxM = 4;

void validate(const MatmulArgs& a) {
  MLXCEL_CHECK(a.m >= 0 && a.n >= 0 && a.k >= 0, ErrorCategory::kInternal,
               "matmul: negative size");
  MLXCEL_CHECK((a.x || a.m * a.k == 0) && (a.w || a.n * a.k == 0) && (a.y || a.m * a.n == 0),
               ErrorCategory::kInternal, "matmul: null pointer");
  for (DType t : {a.x_dtype, a.w_dtype, a.y_dtype}) {
    if (!detail::is_activation_dtype(t)) detail::unsupported_dtype("matmul", t);
  }
  MLXCEL_CHECK((a.x_row_stride == 0 || a.x_row_stride >= a.k) &&
                   (a.y_row_stride == 0 || a.y_row_stride >= a.n),
               ErrorCategory::kInternal, "matmul: row stride smaller than the row");
}

template <typename T>
void gemv_rows_scalar_t(const float* x32, std::int64_t m, std::int64_t k, const T* w,
                        std::int64_t n0, std::int64_t n1, float* y32, std::int64_t ldy) {
  for (std::int64_t n = n0; n < n1; ++n) {
    const T* wr = w + n * k;
    for (std::int64_t i = 0; i < m; ++i) {
      const float* xr = x32 + i * k;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      std::int64_t c = 0;
      for (; c + 8 <= k; c += 8) {
        for (int j = 0; j < 8; ++j) acc[j] += xr[c + j] * to_f32(wr[c + j]);
      }
      float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
      for (; c < k; ++c) s += xr[c] * to_f32(wr[c]);
      y32[i * ldy + n] = s;
    }
  }
}

template <typename T>
void gemm_block_scalar_t(const float* x32, std::int64_t k, const T* w, std::int64_t n0,
                         std::int64_t n1, std::int64_t m0, std::int64_t m1, float* y32,
                         std::int64_t ldy, float* pack) {
  const std::int64_t nc = n1 - n0;
  for (std::int64_t kb = 0; kb < k; kb += kKc) {
    const std::int64_t kc = std::min(kKc, k - kb);
    for (std::int64_t n = 0; n < nc; ++n) {
      const T* wr = w + (n0 + n) * k + kb;
      for (std::int64_t c = 0; c < kc; ++c) pack[c * kNc + n] = to_f32(wr[c]);
    }
    for (std::int64_t m = m0; m < m1; ++m) {
      const float* xr = x32 + m * k + kb;
      float* yr = y32 + m * ldy + n0;
      float acc[kNc];
      for (std::int64_t n = 0; n < nc; ++n) acc[n] = kb == 0 ? 0.0f : yr[n];
      for (std::int64_t c = 0; c < kc; ++c) {
        const float xv = xr[c];
        const float* pr = pack + c * kNc;
        for (std::int64_t n = 0; n < nc; ++n) acc[n] += xv * pr[n];
      }
      for (std::int64_t n = 0; n < nc; ++n) yr[n] = acc[n];
    }
  }
}

void gemv_rows_scalar(const float* x32, std::int64_t m, std::int64_t k, const void* w, DType wt,
                      std::int64_t n0, std::int64_t n1, float* y32, std::int64_t ldy) {
  detail::dispatch_float("matmul", wt, [&](auto tag) {
    using T = decltype(tag);
    gemv_rows_scalar_t(x32, m, k, static_cast<const T*>(w), n0, n1, y32, ldy);
  });
}

void gemm_block_scalar(const float* x32, std::int64_t k, const void* w, DType wt, std::int64_t n0,
                       std::int64_t n1, std::int64_t m0, std::int64_t m1, float* y32,
                       std::int64_t ldy, float* pack) {
  detail::dispatch_float("matmul", wt, [&](auto tag) {
    using T = decltype(tag);
    gemm_block_scalar_t(x32, k, static_cast<const T*>(w), n0, n1, m0, m1, y32, ldy, pack);
  });
}

}  // namespace

void matmul_ref(const MatmulArgs& a) {
  validate(a);
  const std::int64_t xs = a.x_row_stride ? a.x_row_stride : a.k;
  const std::int64_t ys = a.y_row_stride ? a.y_row_stride : a.n;
  std::vector<float> xr(static_cast<std::size_t>(a.k)), wr(static_cast<std::size_t>(a.k));
  std::vector<float> bias(static_cast<std::size_t>(a.n), 0.0f);
  if (a.bias) detail::load_f32(a.bias, a.w_dtype, bias.data(), a.n);
  const std::size_t xe = dtype_size(a.x_dtype), we = dtype_size(a.w_dtype);
  const std::size_t ye = dtype_size(a.y_dtype);
  for (std::int64_t i = 0; i < a.m; ++i) {
    detail::load_f32(static_cast<const char*>(a.x) + i * xs * xe, a.x_dtype, xr.data(), a.k);
    for (std::int64_t j = 0; j < a.n; ++j) {
      detail::load_f32(static_cast<const char*>(a.w) + j * a.k * we, a.w_dtype, wr.data(), a.k);
      double s = 0.0;
      for (std::int64_t c = 0; c < a.k; ++c) s += static_cast<double>(xr[c]) * wr[c];
      float v = static_cast<float>(s) + bias[j];
      detail::store_f32(&v, a.y_dtype, static_cast<char*>(a.y) + (i * ys + j) * ye, 1);
    }
  }
}

void matmul(const MatmulArgs& a, CpuIsa isa, ThreadPool* pool_ptr) {
  validate(a);
  if (a.m == 0 || a.n == 0) return;
  ThreadPool& pool = pool_or_default(pool_ptr);
  const bool use_avx2 = isa == CpuIsa::kAvx2;
  MLXCEL_CHECK(!use_avx2 || isa_supported(isa), ErrorCategory::kUnsupported,
               "matmul: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  const std::int64_t m = a.m, n = a.n, k = a.k;
  const std::int64_t xs = a.x_row_stride ? a.x_row_stride : k;
  const std::int64_t ys = a.y_row_stride ? a.y_row_stride : n;
  const std::size_t xe = dtype_size(a.x_dtype), ye = dtype_size(a.y_dtype);

  // x to contiguous f32 once (M x K is small next to W).
  std::vector<float> x32(static_cast<std::size_t>(m * k));
  pool.parallel_for(m, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(k, 1)),
                    [&](std::int64_t r0, std::int64_t r1) {
                      for (std::int64_t r = r0; r < r1; ++r) {
                        const void* src = static_cast<const char*>(a.x) + r * xs * xe;
                        if (use_avx2) avx2::convert_to_f32(src, a.x_dtype, &x32[r * k], k);
                        else detail::load_f32(src, a.x_dtype, &x32[r * k], k);
                      }
                    });

  // f32 results, leading dimension padded to the register tile width.
  const std::int64_t ldy = detail::ceil_div(n, kNr) * kNr;
  std::vector<float> y32(static_cast<std::size_t>(m * ldy));

  if (m <= kGemvMaxM) {
    // Each task streams a contiguous band of W rows once for all M rows of x.
    pool.parallel_for(n, 16, [&](std::int64_t n0, std::int64_t n1) {
      if (use_avx2) avx2::gemv_rows(x32.data(), m, k, a.w, a.w_dtype, n0, n1, y32.data(), ldy);
      else gemv_rows_scalar(x32.data(), m, k, a.w, a.w_dtype, n0, n1, y32.data(), ldy);
    });
  } else {
    const std::int64_t n_chunks = detail::ceil_div(n, kNc);
    // Split M as well when there are too few weight chunks to keep every thread busy.
    std::int64_t m_block = m;
    const std::int64_t want = static_cast<std::int64_t>(pool.size()) * 4;
    if (n_chunks < want) {
      const std::int64_t m_splits = std::min(detail::ceil_div(want, n_chunks),
                                             detail::ceil_div(m, kMr));
      m_block = detail::ceil_div(detail::ceil_div(m, m_splits), kMr) * kMr;
    }
    const std::int64_t m_blocks = detail::ceil_div(m, m_block);
    pool.parallel_for(n_chunks * m_blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
      std::vector<float> pack(static_cast<std::size_t>(kKc * kNc), 0.0f);
      for (std::int64_t t = t0; t < t1; ++t) {
        const std::int64_t nc = t % n_chunks, mb = t / n_chunks;
        const std::int64_t n0 = nc * kNc, n1 = std::min(n, n0 + kNc);
        const std::int64_t m0 = mb * m_block, m1 = std::min(m, m0 + m_block);
        if (use_avx2) {
          avx2::gemm_block(x32.data(), k, a.w, a.w_dtype, n0, n1, m0, m1, y32.data(), ldy,
                           pack.data());
        } else {
          gemm_block_scalar(x32.data(), k, a.w, a.w_dtype, n0, n1, m0, m1, y32.data(), ldy,
                            pack.data());
        }
      }
    });
  }

  // Bias and the one rounding to y's dtype.
  std::vector<float> bias;
  if (a.bias) {
    bias.resize(static_cast<std::size_t>(n));
    detail::load_f32(a.bias, a.w_dtype, bias.data(), n);
  }
  pool.parallel_for(m, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      float* row = &y32[r * ldy];
      if (!bias.empty()) {
        for (std::int64_t j = 0; j < n; ++j) row[j] += bias[j];
      }
      void* dst = static_cast<char*>(a.y) + r * ys * ye;
      if (use_avx2) avx2::convert_from_f32(row, a.y_dtype, dst, n);
      else detail::store_f32(row, a.y_dtype, dst, n);
    }
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, CpuIsa isa,
              ThreadPool* pool) {
  MLXCEL_CHECK(w.ndim() == 2 && w.is_contiguous(), ErrorCategory::kBadInput,
               "linear: weight must be a contiguous [out, in] matrix, got " + w.shape_str());
  MLXCEL_CHECK(x.ndim() >= 1 && x.dim(-1) == w.dim(1), ErrorCategory::kBadInput,
               "linear: x " + x.shape_str() + " does not match weight " + w.shape_str());
  MLXCEL_CHECK(!bias.defined() || (bias.ndim() == 1 && bias.dim(0) == w.dim(0) &&
                                   bias.dtype() == w.dtype() && bias.is_contiguous()),
               ErrorCategory::kBadInput,
               "linear: bias must be [out] in the weight's dtype, got " + bias.shape_str());
  Tensor xin = x;
  // Row-strided 2-D views run as they are; anything else is made contiguous first.
  const bool row_strided = x.ndim() == 2 && x.strides()[1] == 1;
  if (!row_strided) xin = x.contiguous();
  const std::int64_t k = w.dim(1), n = w.dim(0);
  const std::int64_t m = k == 0 ? 0 : xin.numel() / k;
  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor y = Tensor::empty(x.dtype(), out_shape);
  MatmulArgs a;
  a.x = xin.raw();
  a.x_dtype = xin.dtype();
  a.x_row_stride = row_strided ? xin.strides()[0] : k;
  a.w = w.raw();
  a.w_dtype = w.dtype();
  a.bias = bias.defined() ? bias.raw() : nullptr;
  a.y = y.raw();
  a.y_dtype = y.dtype();
  a.m = m;
  a.n = n;
  a.k = k;
  matmul(a, isa, pool);
  return y;
}

}  // namespace mlxcel::cpu
