#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu {
namespace {

constexpr std::int64_t kBlock = 64;

struct Resolved {
  std::int64_t qh, qr, kh, kr, vh, vr, oh, orow;
};

Resolved resolve(const AttentionArgs& a) {
  Resolved r;
  r.qr = a.q_row_stride ? a.q_row_stride : a.head_dim;
  r.qh = a.q_head_stride ? a.q_head_stride : a.q_len * r.qr;
  r.kr = a.k_row_stride ? a.k_row_stride : a.head_dim;
  r.kh = a.k_head_stride ? a.k_head_stride : a.kv_len * r.kr;
  r.vr = a.v_row_stride ? a.v_row_stride : a.head_dim;
  r.vh = a.v_head_stride ? a.v_head_stride : a.kv_len * r.vr;
  r.orow = a.o_row_stride ? a.o_row_stride : a.head_dim;
  r.oh = a.o_head_stride ? a.o_head_stride : a.q_len * r.orow;
  return r;
}

void validate(const AttentionArgs& a) {
  MLXCEL_CHECK(a.q && a.k && a.v && a.out, ErrorCategory::kInternal, "attention: null pointer");
  MLXCEL_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, ErrorCategory::kBadInput,
               "attention: n_heads " + std::to_string(a.n_heads) +
                   " is not a multiple of n_kv_heads " + std::to_string(a.n_kv_heads));
  MLXCEL_CHECK(a.head_dim > 0 && a.q_len >= 0 && a.kv_len >= 0 && a.q_offset >= 0 && a.window >= 0,
               ErrorCategory::kInternal, "attention: bad sizes");
  if (!detail::is_activation_dtype(a.dtype)) detail::unsupported_dtype("attention", a.dtype);
}

// Visible key range [lo, hi) for query row i.
void key_range(const AttentionArgs& a, std::int64_t i, std::int64_t* lo, std::int64_t* hi) {
  const std::int64_t pos = a.q_offset + i;
  *hi = a.causal ? std::min(a.kv_len, pos + 1) : a.kv_len;
  *lo = a.window > 0 ? std::max<std::int64_t>(0, pos - a.window + 1) : 0;
  if (*lo > *hi) *lo = *hi;
}

template <typename T>
void row_ref(const AttentionArgs& a, const Resolved& s, std::int64_t h, std::int64_t i) {
  const std::int64_t g = a.n_heads / a.n_kv_heads, kvh = h / g, d = a.head_dim;
  const T* q = static_cast<const T*>(a.q) + h * s.qh + i * s.qr;
  T* o = static_cast<T*>(a.out) + h * s.oh + i * s.orow;
  std::int64_t lo, hi;
  key_range(a, i, &lo, &hi);
  std::vector<double> sc(static_cast<std::size_t>(std::max<std::int64_t>(hi - lo, 0)));
  double mx = -std::numeric_limits<double>::infinity();
  for (std::int64_t j = lo; j < hi; ++j) {
    const T* k = static_cast<const T*>(a.k) + kvh * s.kh + j * s.kr;
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c) dot += static_cast<double>(to_f32(q[c])) * to_f32(k[c]);
    sc[j - lo] = dot * a.scale;
    mx = std::max(mx, sc[j - lo]);
  }
  double sum = 0;
  for (double& v : sc) {
    v = std::exp(v - mx);
    sum += v;
  }
  std::vector<double> acc(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t j = lo; j < hi; ++j) {
    const T* v = static_cast<const T*>(a.v) + kvh * s.vh + j * s.vr;
    const double p = sc[j - lo] / sum;
    for (std::int64_t c = 0; c < d; ++c) acc[c] += p * to_f32(v[c]);
  }
  for (std::int64_t c = 0; c < d; ++c) o[c] = from_f32<T>(static_cast<float>(acc[c]));
}

struct Scratch {
  std::vector<float> q, k, v, s, acc;
  explicit Scratch(std::int64_t d)
      : q(d), k(kBlock * d), v(kBlock * d), s(kBlock), acc(d) {}
};

template <typename T, bool kAvx2>
void row_opt(const AttentionArgs& a, const Resolved& st, std::int64_t h, std::int64_t i,
             Scratch& w) {
  const std::int64_t g = a.n_heads / a.n_kv_heads, kvh = h / g, d = a.head_dim;
  const T* q = static_cast<const T*>(a.q) + h * st.qh + i * st.qr;
  T* o = static_cast<T*>(a.out) + h * st.oh + i * st.orow;
  auto to32 = [&](const T* src, float* dst, std::int64_t n) {
    if constexpr (kAvx2) avx2::convert_to_f32(src, detail::dtype_of<T>(), dst, n);
    else for (std::int64_t c = 0; c < n; ++c) dst[c] = to_f32(src[c]);
  };
  auto dot = [&](const float* x, const float* y) {
    if constexpr (kAvx2) return avx2::dot_f32(x, y, d);
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::int64_t c = 0;
    for (; c + 8 <= d; c += 8)
      for (int u = 0; u < 8; ++u) acc[u] += x[c + u] * y[c + u];
    float r = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (; c < d; ++c) r += x[c] * y[c];
    return r;
  };
  auto axpy = [&](float alpha, const float* x, float* y) {
    if constexpr (kAvx2) avx2::axpy_f32(alpha, x, y, d);
    else for (std::int64_t c = 0; c < d; ++c) y[c] += alpha * x[c];
  };
  std::int64_t lo, hi;
  key_range(a, i, &lo, &hi);
  to32(q, w.q.data(), d);
  // Fold the scale into q once.
  for (std::int64_t c = 0; c < d; ++c) w.q[c] *= a.scale;
  std::fill(w.acc.begin(), w.acc.end(), 0.0f);
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  for (std::int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const std::int64_t nb = std::min(kBlock, hi - j0);
    float bm = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < nb; ++j) {
      const T* k = static_cast<const T*>(a.k) + kvh * st.kh + (j0 + j) * st.kr;
      to32(k, w.k.data(), d);
      w.s[j] = dot(w.q.data(), w.k.data());
      bm = std::max(bm, w.s[j]);
    }
    const float m_new = std::max(m, bm);
    const float corr = std::exp(m - m_new);  // 0 on the first block (m = -inf)
    float bs;
    if constexpr (kAvx2) {
      bs = avx2::exp_sub_sum_f32(w.s.data(), m_new, w.s.data(), nb);
      avx2::scale_f32(corr, w.acc.data(), d);
    } else {
      bs = 0.0f;
      for (std::int64_t j = 0; j < nb; ++j) {
        w.s[j] = std::exp(w.s[j] - m_new);
        bs += w.s[j];
      }
      for (float& x : w.acc) x *= corr;
    }
    l = l * corr + bs;
    m = m_new;
    for (std::int64_t j = 0; j < nb; ++j) {
      const T* v = static_cast<const T*>(a.v) + kvh * st.vh + (j0 + j) * st.vr;
      to32(v, w.v.data(), d);
      axpy(w.s[j], w.v.data(), w.acc.data());
    }
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (std::int64_t c = 0; c < d; ++c) w.acc[c] *= inv;
  if constexpr (kAvx2) avx2::convert_from_f32(w.acc.data(), detail::dtype_of<T>(), o, d);
  else for (std::int64_t c = 0; c < d; ++c) o[c] = from_f32<T>(w.acc[c]);
}

}  // namespace

void attention_ref(const AttentionArgs& a) {
  validate(a);
  const Resolved s = resolve(a);
  detail::dispatch_float("attention", a.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t h = 0; h < a.n_heads; ++h)
      for (std::int64_t i = 0; i < a.q_len; ++i) row_ref<T>(a, s, h, i);
  });
}

void attention(const AttentionArgs& a, CpuIsa isa, ThreadPool* pool) {
  validate(a);
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               "attention: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  const Resolved s = resolve(a);
  detail::dispatch_float("attention", a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t tasks = a.n_heads * a.q_len;
    pool_or_default(pool).parallel_for(tasks, 1, [&](std::int64_t b, std::int64_t e) {
      Scratch w(a.head_dim);
      for (std::int64_t t = b; t < e; ++t) {
        const std::int64_t h = t / a.q_len, i = t % a.q_len;
        if (isa == CpuIsa::kAvx2) row_opt<T, true>(a, s, h, i, w);
        else row_opt<T, false>(a, s, h, i, w);
      }
    });
  });
}

}  // namespace mlxcel::cpu
