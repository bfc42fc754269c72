#include "backend/cpu/avx2/attention_kernels.h"
#include "backend/cpu/avx2/simd.h"

namespace mlxcel::cpu::avx2 {
namespace {

template <typename T>
float dot_t(const float* q, const T* k, int d) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= d; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k + i + 8), a1);
  }
  for (; i + 8 <= d; i += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
  float s = hsum(_mm256_add_ps(a0, a1));
  for (; i < d; ++i) s += q[i] * to_f32(k[i]);
  return s;
}

template <typename T>
void accumulate_t(float c, float p, const T* v, float* acc, int d) {
  const __m256 vc = _mm256_set1_ps(c), vp = _mm256_set1_ps(p);
  int i = 0;
  for (; i + 8 <= d; i += 8)
    _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(vp, load8(v + i), _mm256_mul_ps(_mm256_loadu_ps(acc + i), vc)));
  for (; i < d; ++i) acc[i] = acc[i] * c + p * to_f32(v[i]);
}

}  // namespace

float attn_dot(const float* q, const void* k, DType t, int d) {
  switch (t) {
    case DType::kBF16: return dot_t(q, static_cast<const bf16*>(k), d);
    case DType::kF16: return dot_t(q, static_cast<const f16*>(k), d);
    default: return dot_t(q, static_cast<const float*>(k), d);
  }
}

void attn_accumulate(float c, float p, const void* v, DType t, float* acc, int d) {
  switch (t) {
    case DType::kBF16: return accumulate_t(c, p, static_cast<const bf16*>(v), acc, d);
    case DType::kF16: return accumulate_t(c, p, static_cast<const f16*>(v), acc, d);
    default: return accumulate_t(c, p, static_cast<const float*>(v), acc, d);
  }
}

}  // namespace mlxcel::cpu::avx2
