// AVX2/FMA dense dot kernel: the row-stable chain of backend/cpu/dot_kernels.h over MR x NR
// register tiles. W rows are read in their own dtype and widened in registers (no packing), so
// M = 1 streams W once and prefill reuses each widened vector for MR rows of x.
// Built with -ffp-contract=off: the only fused operations are the explicit _mm256_fmadd_ps.
#include <algorithm>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/avx2/simd.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu::avx2 {
namespace {

// W rows per register tile for MR rows of x: MR * NR accumulators plus MR x vectors and one W
// vector fit the 16 ymm registers, and MR * NR >= 8 keeps enough FMAs in flight.
template <int MR>
constexpr int kNr = MR == 1   ? 8
                    : MR == 4 ? 2
                              : 4;

// Elements [0, n) of p widened to f32, zeros above (the zero-padded last chunk).
template <typename T>
inline __m256 load_partial(const T* p, std::int64_t n) {
  T tmp[8] = {};
  std::copy(p, p + n, tmp);
  return load8(tmp);
}

// acc[(j * MR + i) * 8] (+)= x_i · W_j over elements [kb, ke) for j < NR.
template <int MR, int NR, typename T>
void tile(const float* x, std::int64_t ldx, const T* w, std::int64_t k, std::int64_t kb,
          std::int64_t ke, float* acc) {
  __m256 c[MR][NR];
  for (int j = 0; j < NR; ++j)
    for (int i = 0; i < MR; ++i) c[i][j] = _mm256_load_ps(acc + (j * MR + i) * 8);
  std::int64_t e = kb;
  for (; e + 8 <= ke; e += 8) {
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = load8(w + j * k + e);
      for (int i = 0; i < MR; ++i)
        c[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + e), wv, c[i][j]);
    }
  }
  if (e < ke) {
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = load_partial(w + j * k + e, ke - e);
      for (int i = 0; i < MR; ++i)
        c[i][j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i * ldx + e), wv, c[i][j]);
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int i = 0; i < MR; ++i) _mm256_store_ps(acc + (j * MR + i) * 8, c[i][j]);
}

template <int MR, typename T>
void rows(const DotArgs& a) {
  constexpr int NR = kNr<MR>;
  const T* w = static_cast<const T*>(a.w);
  const std::int64_t kc = k_block(MR, a.k, 8);
  alignas(32) float acc[kMaxRowsPerCall * MR * 8];
  std::fill(acc, acc + a.nrows * MR * 8, 0.0f);
  for (std::int64_t kb = 0; kb < a.k; kb += kc) {
    const std::int64_t ke = std::min(a.k, kb + kc);
    std::int64_t j = 0;
    for (; j + NR <= a.nrows; j += NR)
      tile<MR, NR>(a.x, a.ldx, w + j * a.k, a.k, kb, ke, acc + j * MR * 8);
    for (; j < a.nrows; ++j) tile<MR, 1>(a.x, a.ldx, w + j * a.k, a.k, kb, ke, acc + j * MR * 8);
  }
  for (std::int64_t j = 0; j < a.nrows; ++j)
    for (int i = 0; i < MR; ++i) {
      float v = hsum(_mm256_load_ps(acc + (j * MR + i) * 8));
      if (a.bias) v += a.bias[j];
      a.y[i * a.ldy + j] = v;
    }
}

}  // namespace

void dot_rows(const DotArgs& a) {
  detail::dispatch_float("matmul", a.w_dtype, [&](auto tag) {
    using T = decltype(tag);
    switch (a.mr) {
      case 1:
        rows<1, T>(a);
        break;
      case 2:
        rows<2, T>(a);
        break;
      case 3:
        rows<3, T>(a);
        break;
      default:
        rows<4, T>(a);
        break;
    }
  });
}

}  // namespace mlxcel::cpu::avx2
