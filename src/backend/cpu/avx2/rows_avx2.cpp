// AVX2 row kernels: conversions, reductions, activations, elementwise, RMSNorm rows.
#include <cmath>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/avx2/simd.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu::avx2 {
namespace {

// sigmoid(z) * x, the shared core of silu and the tanh-form gelu.
inline __m256 x_sigmoid(__m256 x, __m256 z) {
  __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), z));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

inline __m256 act8(int kind, __m256 x) {
  if (kind == 0) return x_sigmoid(x, x);
  if (kind == 2) {
    // 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3)
    __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    __m256 u = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x);
    return x_sigmoid(x, _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.79788456080286536f), u));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, x);
  for (float& v : t) v = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
  return _mm256_load_ps(t);
}

inline float act1(int kind, float x) {
  alignas(32) float t[8] = {x, 0, 0, 0, 0, 0, 0, 0};
  _mm256_store_ps(t, act8(kind, _mm256_load_ps(t)));
  return t[0];
}

template <typename T>
void activation_t(int kind, const T* x, T* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, act8(kind, load8(x + i)));
  for (; i < n; ++i) y[i] = from_f32<T>(act1(kind, to_f32(x[i])));
}

template <typename T>
void gated_t(int kind, const T* g, const T* u, T* y, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, _mm256_mul_ps(act8(kind, load8(g + i)), load8(u + i)));
  for (; i < n; ++i) y[i] = from_f32<T>(act1(kind, to_f32(g[i])) * to_f32(u[i]));
}

template <typename T>
void binary_t(int kind, const T* a, const T* b, T* y, std::int64_t n, float alpha) {
  std::int64_t i = 0;
  const __m256 va = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) {
    __m256 x = load8(a + i);
    if (kind == 0) x = _mm256_add_ps(x, load8(b + i));
    else if (kind == 1) x = _mm256_mul_ps(x, load8(b + i));
    else x = _mm256_mul_ps(x, va);
    store8(y + i, x);
  }
  for (; i < n; ++i) {
    float x = to_f32(a[i]);
    if (kind == 0) x += to_f32(b[i]);
    else if (kind == 1) x *= to_f32(b[i]);
    else x *= alpha;
    y[i] = from_f32<T>(x);
  }
}

template <typename T>
void rms_norm_row_t(const T* x, const T* w, T* y, std::int64_t n, float eps) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = load8(x + i), b = load8(x + i + 8);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
  }
  for (; i + 8 <= n; i += 8) {
    __m256 a = load8(x + i);
    s0 = _mm256_fmadd_ps(a, a, s0);
  }
  float ss = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) ss += to_f32(x[i]) * to_f32(x[i]);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const __m256 vi = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8)
    store8(y + i, _mm256_mul_ps(_mm256_mul_ps(load8(x + i), vi), load8(w + i)));
  for (; i < n; ++i) y[i] = from_f32<T>(to_f32(x[i]) * inv * to_f32(w[i]));
}

}  // namespace

void convert_to_f32(const void* src, DType t, float* dst, std::int64_t n) {
  detail::dispatch_float("convert_to_f32", t, [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src);
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load8(s + i));
    for (; i < n; ++i) dst[i] = to_f32(s[i]);
  });
}

void convert_from_f32(const float* src, DType t, void* dst, std::int64_t n) {
  detail::dispatch_float("convert_from_f32", t, [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst);
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) store8(d + i, _mm256_loadu_ps(src + i));
    for (; i < n; ++i) d[i] = from_f32<T>(src[i]);
  });
}

float dot_f32(const float* a, const float* b, std::int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy_f32(float alpha, const float* x, float* y, std::int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

void scale_f32(float alpha, float* y, std::int64_t n) {
  const __m256 va = _mm256_set1_ps(alpha);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(va, _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] *= alpha;
}

float max_f32(const float* x, std::int64_t n) {
  __m256 m = _mm256_set1_ps(-__builtin_inff());
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float r = hmax(m);
  for (; i < n; ++i) r = x[i] > r ? x[i] : r;
  return r;
}

float exp_sub_sum_f32(const float* x, float sub, float* y, std::int64_t n) {
  const __m256 vs = _mm256_set1_ps(sub);
  __m256 acc = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum(acc);
  if (i < n) {
    alignas(32) float t[8];
    for (int j = 0; j < 8; ++j) t[j] = i + j < n ? x[i + j] - sub : -__builtin_inff();
    _mm256_store_ps(t, exp8(_mm256_load_ps(t)));
    for (int j = 0; i + j < n; ++j) {
      y[i + j] = t[j];
      s += t[j];
    }
  }
  return s;
}

void activation_rows(int kind, const void* x, void* y, DType t, std::int64_t n) {
  detail::dispatch_float("activation", t, [&](auto tag) {
    using T = decltype(tag);
    activation_t(kind, static_cast<const T*>(x), static_cast<T*>(y), n);
  });
}

void gated_rows(int kind, const void* gate, const void* up, void* y, DType t, std::int64_t n) {
  detail::dispatch_float("gated_activation", t, [&](auto tag) {
    using T = decltype(tag);
    gated_t(kind, static_cast<const T*>(gate), static_cast<const T*>(up), static_cast<T*>(y), n);
  });
}

void binary_rows(int kind, const void* a, const void* b, void* y, DType t, std::int64_t n,
                 float alpha) {
  detail::dispatch_float("binary", t, [&](auto tag) {
    using T = decltype(tag);
    binary_t(kind, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n,
             alpha);
  });
}

void rms_norm_row(const void* x, const void* w, void* y, DType t, std::int64_t cols, float eps) {
  detail::dispatch_float("rms_norm", t, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_row_t(static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), cols,
                   eps);
  });
}

}  // namespace mlxcel::cpu::avx2
