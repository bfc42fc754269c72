#include "backend/cpu/matmul.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/kernel_util.h"
#include "core/error.h"

namespace mlxcel::cpu {
namespace {

void validate(const MatmulArgs& a) {
  MLXCEL_CHECK(a.m >= 0 && a.n >= 0 && a.k >= 0, ErrorCategory::kInternal, "matmul: negative size");
  MLXCEL_CHECK((a.x || a.m * a.k == 0) && (a.w || a.n * a.k == 0) && (a.y || a.m * a.n == 0),
               ErrorCategory::kInternal, "matmul: null pointer");
  for (DType t : {a.x_dtype, a.w_dtype, a.y_dtype}) {
    if (!detail::is_activation_dtype(t)) detail::unsupported_dtype("matmul", t);
  }
  MLXCEL_CHECK((a.x_row_stride == 0 || a.x_row_stride >= a.k) &&
                   (a.y_row_stride == 0 || a.y_row_stride >= a.n),
               ErrorCategory::kInternal, "matmul: row stride smaller than the row");
}

// The scalar twin of avx2::dot_rows: the same 8-lane chain and reduction tree per output, with
// a separate multiply and add (dot_kernels.h). Four W rows at a time share each x load.
template <typename T>
void dot_rows_scalar_t(const DotArgs& a) {
  constexpr int kRows = 4;
  const T* w = static_cast<const T*>(a.w);
  const std::int64_t full = a.k / kLanes * kLanes;
  for (std::int64_t j0 = 0; j0 < a.nrows; j0 += kRows) {
    const int nr = static_cast<int>(std::min<std::int64_t>(kRows, a.nrows - j0));
    for (std::int64_t i = 0; i < a.mr; ++i) {
      const float* x = a.x + i * a.ldx;
      float acc[kRows][kLanes] = {};
      for (std::int64_t e = 0; e < full; e += kLanes)
        for (int r = 0; r < nr; ++r) {
          const T* wr = w + (j0 + r) * a.k + e;
          for (int l = 0; l < kLanes; ++l) acc[r][l] = acc[r][l] + x[e + l] * to_f32(wr[l]);
        }
      for (int r = 0; r < nr; ++r) {
        const T* wr = w + (j0 + r) * a.k;
        for (std::int64_t e = full; e < a.k; ++e)
          acc[r][e - full] = acc[r][e - full] + x[e] * to_f32(wr[e]);
        float v = hsum8(acc[r]);
        if (a.bias) v += a.bias[j0 + r];
        a.y[i * a.ldy + j0 + r] = v;
      }
    }
  }
}

void dot_rows_scalar(const DotArgs& a) {
  detail::dispatch_float("matmul", a.w_dtype,
                         [&](auto tag) { dot_rows_scalar_t<decltype(tag)>(a); });
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

  // x rows zero-padded to whole 8-lane chunks, so the last chunk of every dot is a full vector.
  const std::int64_t ldx = detail::ceil_div(k, kLanes) * kLanes;
  std::vector<float> x32(static_cast<std::size_t>(m * ldx), 0.0f);
  pool.parallel_for(m, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(k, 1)),
                    [&](std::int64_t r0, std::int64_t r1) {
                      for (std::int64_t r = r0; r < r1; ++r) {
                        const void* src = static_cast<const char*>(a.x) + r * xs * xe;
                        if (use_avx2)
                          avx2::convert_to_f32(src, a.x_dtype, x32.data() + r * ldx, k);
                        else
                          detail::load_f32(src, a.x_dtype, x32.data() + r * ldx, k);
                      }
                    });
  std::vector<float> bias;
  if (a.bias) {
    bias.resize(static_cast<std::size_t>(n));
    detail::load_f32(a.bias, a.w_dtype, bias.data(), n);
  }
  // f32 results go straight to y when y is f32, else through a buffer and one rounding.
  const bool direct = a.y_dtype == DType::kF32;
  std::vector<float> y32(direct ? 0 : static_cast<std::size_t>(m * n));
  float* yf = direct ? static_cast<float*>(a.y) : y32.data();
  const std::int64_t ldy = direct ? ys : n;

  const WorkSplit ws = split_work(m, n, kMaxRowsPerCall, pool.size());
  const std::int64_t mt = m_tile(m);
  const std::size_t w_esize = dtype_size(a.w_dtype);
  pool.parallel_for(ws.n_chunks * ws.m_blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t n0 = (t % ws.n_chunks) * ws.n_chunk, n1 = std::min(n, n0 + ws.n_chunk);
      const std::int64_t m0 = (t / ws.n_chunks) * ws.m_block, m1 = std::min(m, m0 + ws.m_block);
      for (std::int64_t i = m0; i < m1; i += mt) {
        DotArgs d;
        d.x = x32.data() + i * ldx;
        d.ldx = ldx;
        d.w = static_cast<const char*>(a.w) + n0 * k * w_esize;
        d.w_dtype = a.w_dtype;
        d.bias = bias.empty() ? nullptr : bias.data() + n0;
        d.y = yf + i * ldy + n0;
        d.ldy = ldy;
        d.mr = std::min(mt, m1 - i);
        d.nrows = n1 - n0;
        d.k = k;
        if (use_avx2)
          avx2::dot_rows(d);
        else
          dot_rows_scalar(d);
      }
    }
  });
  if (direct) return;

  pool.parallel_for(m, std::max<std::int64_t>(1, 16384 / n), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      void* dst = static_cast<char*>(a.y) + r * ys * ye;
      if (use_avx2)
        avx2::convert_from_f32(y32.data() + r * n, a.y_dtype, dst, n);
      else
        detail::store_f32(y32.data() + r * n, a.y_dtype, dst, n);
    }
  });
}

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias, CpuIsa isa, ThreadPool* pool) {
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
