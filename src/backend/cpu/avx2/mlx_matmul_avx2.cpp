// The eight independent chains of backend/cpu/qmatmul_mlx.cpp, one per AVX2 lane. This file is
// compiled with -ffp-contract=off: MLX's chain has no FMA, so a fused multiply-add here would
// change the result.
#include <immintrin.h>

#include "backend/cpu/avx2/kernels.h"

namespace mlxcel::cpu::avx2 {
namespace {

// Rounds every lane to the nearest bfloat16 (ties to even), kept as f32. NaN cannot arise from
// the checked weights and finite activations this runs on.
struct RoundBf16 {
  __m256 operator()(__m256 v) const {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};
struct RoundF16 {
  __m256 operator()(__m256 v) const {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};
struct RoundF32 {
  __m256 operator()(__m256 v) const { return v; }
};

template <typename R>
void chains(const float* wt, const float* st, const float* x, std::int64_t k,
            int group_size, float* out) {
  const R rnd;
  __m256 sum = _mm256_setzero_ps();
  if (st == nullptr) {
    for (std::int64_t j = 0; j < k; ++j) {
      const __m256 p = rnd(_mm256_mul_ps(_mm256_set1_ps(x[j]), _mm256_loadu_ps(wt + j * 8)));
      sum = rnd(_mm256_add_ps(sum, p));
    }
  } else {
    for (std::int64_t g0 = 0, g = 0; g0 < k; g0 += group_size, ++g) {
      __m256 gs = _mm256_setzero_ps();
      for (std::int64_t j = g0; j < g0 + group_size; ++j) {
        const __m256 p = rnd(_mm256_mul_ps(_mm256_set1_ps(x[j]), _mm256_loadu_ps(wt + j * 8)));
        gs = rnd(_mm256_add_ps(gs, p));
      }
      sum = rnd(_mm256_add_ps(sum, rnd(_mm256_mul_ps(_mm256_loadu_ps(st + g * 8), gs))));
    }
  }
  _mm256_storeu_ps(out, sum);
}

}  // namespace

void qmm_mlx_tile(const float* wt, const float* st, const float* x, std::int64_t k,
                  int group_size, DType act, float* out) {
  switch (act) {
    case DType::kBF16: return chains<RoundBf16>(wt, st, x, k, group_size, out);
    case DType::kF16: return chains<RoundF16>(wt, st, x, k, group_size, out);
    default: return chains<RoundF32>(wt, st, x, k, group_size, out);
  }
}

}  // namespace mlxcel::cpu::avx2
