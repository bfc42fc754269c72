// AVX2 decoders for affine 4- and 8-bit MLX rows (the common mlx-community formats).
#include <immintrin.h>

#include <cmath>

#include "backend/cpu/avx2/kernels.h"

namespace mlxcel::cpu::avx2 {
namespace {
inline float scale_at(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return static_cast<const bf16*>(p)[i].to_float();
    case DType::kF16: return static_cast<const f16*>(p)[i].to_float();
    default: return static_cast<const float*>(p)[i];
  }
}
}  // namespace

void decode_affine_row(const std::uint32_t* w, const void* scales, const void* biases,
                       DType sdt, std::int64_t group0, int bits, int group_size, std::int64_t k,
                       float* out) {
  const std::int64_t groups = k / group_size;
  const __m256i shifts4 = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  const __m256i mask4 = _mm256_set1_epi32(0xF);
  for (std::int64_t g = 0; g < groups; ++g) {
    const __m256 s = _mm256_set1_ps(scale_at(scales, sdt, group0 + g));
    const __m256 b = _mm256_set1_ps(scale_at(biases, sdt, group0 + g));
    float* o = out + g * group_size;
    if (bits == 4) {
      const std::uint32_t* wg = w + g * group_size / 8;
      for (int i = 0; i < group_size / 8; ++i) {
        // One word holds 8 nibbles, element j in bits 4j..4j+3.
        __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(wg[i])), shifts4);
        __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(v, mask4));
        _mm256_storeu_ps(o + 8 * i, _mm256_add_ps(_mm256_mul_ps(q, s), b));
      }
    } else {  // 8-bit: 4 bytes per word, little-endian
      const std::uint8_t* bg = reinterpret_cast<const std::uint8_t*>(w) + g * group_size;
      for (int i = 0; i < group_size / 8; ++i) {
        __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bg + 8 * i));
        __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes));
        _mm256_storeu_ps(o + 8 * i, _mm256_add_ps(_mm256_mul_ps(q, s), b));
      }
    }
  }
}

}  // namespace mlxcel::cpu::avx2
