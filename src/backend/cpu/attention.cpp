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
  std::vector<float> q, k, v, s, acc, m, l;
  Scratch(std::int64_t d, std::int64_t g)
      : q(g * d), k(kBlock * d), v(kBlock * d), s(g * kBlock), acc(g * d), m(g), l(g) {}
};

// Query row i of the `ng` query heads h0..h0+ng-1, which share KV head kvh: each block of keys
// and values is converted to f32 once and used by all of them (GQA decode streams the cache once).
template <typename T, bool kAvx2>
void rows_opt(const AttentionArgs& a, const Resolved& st, std::int64_t h0, std::int64_t ng,
              std::int64_t i, Scratch& w) {
  const std::int64_t g = a.n_heads / a.n_kv_heads, kvh = h0 / g, d = a.head_dim;
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
  for (std::int64_t u = 0; u < ng; ++u) {
    const T* q = static_cast<const T*>(a.q) + (h0 + u) * st.qh + i * st.qr;
    float* qf = &w.q[u * d];
    to32(q, qf, d);
    for (std::int64_t c = 0; c < d; ++c) qf[c] *= a.scale;  // fold the scale into q once
    w.m[u] = -std::numeric_limits<float>::infinity();
    w.l[u] = 0.0f;
  }
  std::fill(w.acc.begin(), w.acc.begin() + ng * d, 0.0f);
  for (std::int64_t j0 = lo; j0 < hi; j0 += kBlock) {
    const std::int64_t nb = std::min(kBlock, hi - j0);
    for (std::int64_t j = 0; j < nb; ++j) {
      to32(static_cast<const T*>(a.k) + kvh * st.kh + (j0 + j) * st.kr, &w.k[j * d], d);
      to32(static_cast<const T*>(a.v) + kvh * st.vh + (j0 + j) * st.vr, &w.v[j * d], d);
    }
    for (std::int64_t u = 0; u < ng; ++u) {
      float* s = &w.s[u * kBlock];
      float* acc = &w.acc[u * d];
      float bm = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < nb; ++j) {
        s[j] = dot(&w.q[u * d], &w.k[j * d]);
        bm = std::max(bm, s[j]);
      }
      const float m_new = std::max(w.m[u], bm);
      const float corr = std::exp(w.m[u] - m_new);  // 0 on the first block (m = -inf)
      float bs;
      if constexpr (kAvx2) {
        bs = avx2::exp_sub_sum_f32(s, m_new, s, nb);
        avx2::scale_f32(corr, acc, d);
      } else {
        bs = 0.0f;
        for (std::int64_t j = 0; j < nb; ++j) {
          s[j] = std::exp(s[j] - m_new);
          bs += s[j];
        }
        for (std::int64_t c = 0; c < d; ++c) acc[c] *= corr;
      }
      w.l[u] = w.l[u] * corr + bs;
      w.m[u] = m_new;
      for (std::int64_t j = 0; j < nb; ++j) axpy(s[j], &w.v[j * d], acc);
    }
  }
  for (std::int64_t u = 0; u < ng; ++u) {
    float* acc = &w.acc[u * d];
    const float inv = w.l[u] > 0.0f ? 1.0f / w.l[u] : 0.0f;
    for (std::int64_t c = 0; c < d; ++c) acc[c] *= inv;
    T* o = static_cast<T*>(a.out) + (h0 + u) * st.oh + i * st.orow;
    if constexpr (kAvx2) avx2::convert_from_f32(acc, detail::dtype_of<T>(), o, d);
    else for (std::int64_t c = 0; c < d; ++c) o[c] = from_f32<T>(acc[c]);
  }
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
    ThreadPool& tp = pool_or_default(pool);
    // Group the query heads of one KV head when that still leaves >= 2 tasks per thread;
    // otherwise one task per query head (more parallelism, G x the cache reads).
    const std::int64_t g = a.n_heads / a.n_kv_heads;
    const bool grouped = a.n_kv_heads * a.q_len >= 2 * static_cast<std::int64_t>(tp.size());
    const std::int64_t ng = grouped ? g : 1;
    const std::int64_t head_groups = a.n_heads / ng;
    const std::int64_t tasks = head_groups * a.q_len;
    tp.parallel_for(tasks, 1, [&](std::int64_t b, std::int64_t e) {
      Scratch w(a.head_dim, ng);
      for (std::int64_t t = b; t < e; ++t) {
        const std::int64_t hg = t / a.q_len, i = t % a.q_len;
        if (isa == CpuIsa::kAvx2) rows_opt<T, true>(a, s, hg * ng, ng, i, w);
        else rows_opt<T, false>(a, s, hg * ng, ng, i, w);
      }
    });
  });
}

}  // namespace mlxcel::cpu
