// AVX2/FMA matmul inner kernels (see backend/cpu/matmul.cpp for the blocking).
#include <algorithm>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/avx2/simd.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu::avx2 {
namespace {

constexpr std::int64_t kKc = 256;
constexpr std::int64_t kNc = 64;
constexpr std::int64_t kNr = 16;

// One W row against MR rows of x; U independent accumulators per row hide the FMA latency.
template <int MR, int U, typename T>
void gemv_row(const float* x32, std::int64_t k, const T* wr, float* out, std::int64_t ldy) {
  __m256 acc[MR][U];
  for (int i = 0; i < MR; ++i)
    for (int u = 0; u < U; ++u) acc[i][u] = _mm256_setzero_ps();
  std::int64_t c = 0;
  for (; c + 8 * U <= k; c += 8 * U) {
    for (int u = 0; u < U; ++u) {
      __m256 wv = load8(wr + c + 8 * u);
      for (int i = 0; i < MR; ++i)
        acc[i][u] = _mm256_fmadd_ps(_mm256_loadu_ps(x32 + i * k + c + 8 * u), wv, acc[i][u]);
    }
  }
  for (; c + 8 <= k; c += 8) {
    __m256 wv = load8(wr + c);
    for (int i = 0; i < MR; ++i)
      acc[i][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x32 + i * k + c), wv, acc[i][0]);
  }
  for (int i = 0; i < MR; ++i) {
    __m256 s = acc[i][0];
    for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[i][u]);
    float t = hsum(s);
    for (std::int64_t cc = c; cc < k; ++cc) t += x32[i * k + cc] * to_f32(wr[cc]);
    out[i * ldy] = t;
  }
}

template <typename T>
void gemv_rows_t(const float* x32, std::int64_t m, std::int64_t k, const T* w, std::int64_t n0,
                 std::int64_t n1, float* y32, std::int64_t ldy) {
  for (std::int64_t n = n0; n < n1; ++n) {
    const T* wr = w + n * k;
    if (n + 4 < n1) _mm_prefetch(reinterpret_cast<const char*>(wr + 4 * k), _MM_HINT_T0);
    switch (m) {
      case 1: gemv_row<1, 4>(x32, k, wr, y32 + n, ldy); break;
      case 2: gemv_row<2, 4>(x32, k, wr, y32 + n, ldy); break;
      case 3: gemv_row<3, 2>(x32, k, wr, y32 + n, ldy); break;
      default: gemv_row<4, 1>(x32, k, wr, y32 + n, ldy); break;
    }
  }
}

// C[MR x 16] (+)= X[MR x kc] · P[kc x 16], P row stride kNc, X row stride ldx.
template <int MR>
void micro_kernel(const float* x, std::int64_t ldx, const float* p, std::int64_t kc, float* c,
                  std::int64_t ldc, bool accumulate) {
  __m256 acc0[MR], acc1[MR];
  for (int i = 0; i < MR; ++i) {
    acc0[i] = accumulate ? _mm256_loadu_ps(c + i * ldc) : _mm256_setzero_ps();
    acc1[i] = accumulate ? _mm256_loadu_ps(c + i * ldc + 8) : _mm256_setzero_ps();
  }
  for (std::int64_t q = 0; q < kc; ++q) {
    __m256 b0 = _mm256_loadu_ps(p + q * kNc);
    __m256 b1 = _mm256_loadu_ps(p + q * kNc + 8);
    for (int i = 0; i < MR; ++i) {
      __m256 a = _mm256_broadcast_ss(x + i * ldx + q);
      acc0[i] = _mm256_fmadd_ps(a, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(a, b1, acc1[i]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    _mm256_storeu_ps(c + i * ldc, acc0[i]);
    _mm256_storeu_ps(c + i * ldc + 8, acc1[i]);
  }
}

void run_micro(std::int64_t mr, const float* x, std::int64_t ldx, const float* p, std::int64_t kc,
               float* c, std::int64_t ldc, bool accumulate) {
  switch (mr) {
    case 1: micro_kernel<1>(x, ldx, p, kc, c, ldc, accumulate); break;
    case 2: micro_kernel<2>(x, ldx, p, kc, c, ldc, accumulate); break;
    case 3: micro_kernel<3>(x, ldx, p, kc, c, ldc, accumulate); break;
    case 4: micro_kernel<4>(x, ldx, p, kc, c, ldc, accumulate); break;
    case 5: micro_kernel<5>(x, ldx, p, kc, c, ldc, accumulate); break;
    default: micro_kernel<6>(x, ldx, p, kc, c, ldc, accumulate); break;
  }
}

// Packs W[n0 + r, kb + q] (r < nc, q < kc) as f32 into p[q * kNc + r]; columns nc..padded are 0.
template <typename T>
void pack_w(const T* w, std::int64_t k, std::int64_t n0, std::int64_t nc, std::int64_t kb,
            std::int64_t kc, float* p) {
  const std::int64_t padded = detail::ceil_div(nc, kNr) * kNr;
  alignas(32) float tmp[8];
  for (std::int64_t r = 0; r < nc; ++r) {
    const T* wr = w + (n0 + r) * k + kb;
    std::int64_t q = 0;
    for (; q + 8 <= kc; q += 8) {
      _mm256_store_ps(tmp, load8(wr + q));
      for (int j = 0; j < 8; ++j) p[(q + j) * kNc + r] = tmp[j];
    }
    for (; q < kc; ++q) p[q * kNc + r] = to_f32(wr[q]);
  }
  for (std::int64_t r = nc; r < padded; ++r)
    for (std::int64_t q = 0; q < kc; ++q) p[q * kNc + r] = 0.0f;
}

template <typename T>
void gemm_block_t(const float* x32, std::int64_t k, const T* w, std::int64_t n0, std::int64_t n1,
                  std::int64_t m0, std::int64_t m1, float* y32, std::int64_t ldy, float* pack) {
  const std::int64_t nc = n1 - n0;
  const std::int64_t panels = detail::ceil_div(nc, kNr);
  if (k == 0) {
    for (std::int64_t m = m0; m < m1; ++m)
      for (std::int64_t r = 0; r < panels * kNr; ++r) y32[m * ldy + n0 + r] = 0.0f;
    return;
  }
  for (std::int64_t kb = 0; kb < k; kb += kKc) {
    const std::int64_t kc = std::min(kKc, k - kb);
    pack_w(w, k, n0, nc, kb, kc, pack);
    for (std::int64_t m = m0; m < m1; m += 6) {
      const std::int64_t mr = std::min<std::int64_t>(6, m1 - m);
      for (std::int64_t pnl = 0; pnl < panels; ++pnl) {
        run_micro(mr, x32 + m * k + kb, k, pack + pnl * kNr, kc, y32 + m * ldy + n0 + pnl * kNr,
                  ldy, kb > 0);
      }
    }
  }
}

}  // namespace

void gemv_rows(const float* x32, std::int64_t m, std::int64_t k, const void* w, DType w_dtype,
               std::int64_t n0, std::int64_t n1, float* y32, std::int64_t ldy) {
  detail::dispatch_float("matmul", w_dtype, [&](auto tag) {
    using T = decltype(tag);
    gemv_rows_t(x32, m, k, static_cast<const T*>(w), n0, n1, y32, ldy);
  });
}

void gemm_block(const float* x32, std::int64_t k, const void* w, DType w_dtype, std::int64_t n0,
                std::int64_t n1, std::int64_t m0, std::int64_t m1, float* y32, std::int64_t ldy,
                float* pack) {
  detail::dispatch_float("matmul", w_dtype, [&](auto tag) {
    using T = decltype(tag);
    gemm_block_t(x32, k, static_cast<const T*>(w), n0, n1, m0, m1, y32, ldy, pack);
  });
}

}  // namespace mlxcel::cpu::avx2
