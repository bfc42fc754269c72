// Kernel lab: fused dequant + dot for MLX affine 4-bit rows (y = x · dequant(W)ᵀ), numbered
// variants against a double-precision reference, with a timing sweep. Not part of the build:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -ffp-contract=off -pthread lab.cpp -o /tmp/qlab
//   /tmp/qlab [reps] [threads: 1 or 2]
// Every variant computes, per output, the same row-stable chain (see src/backend/cpu/qmatmul.h):
//   per group g: d = Σ x'·q (8 lanes, FMA), acc = fma(s_g, d, acc); then + Σ_g b_g·xsum_g.
// Variants differ only in how W is decoded and how many rows share a register tile:
//   v1  1x8 tile, q from a broadcast word shifted per lane (natural order)
//   v2  1x8 tile, q from vpmovzxbd of 8 bytes, low/high nibbles (x permuted per 16 elements)
//   v3  1x4 tile, v2 decode, acc kept in registers
//   v4  4x2 tile, v2 decode (prefill shape)
//   v5  3x3 tile, v2 decode (prefill shape)
//   v6  2x4, v7 4x3, v8 3x4 tiles, v2 decode (prefill shape)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr int kGs = 64;

struct Mat {
  std::int64_t n, k;
  std::vector<std::uint8_t> w;  // n * k / 2 bytes, element j in nibble j (LSB first)
  std::vector<float> s, b;      // n * k / gs
};

Mat make_mat(std::int64_t n, std::int64_t k, unsigned seed) {
  Mat m{n, k, {}, {}, {}};
  std::mt19937 rng(seed);
  m.w.resize(static_cast<std::size_t>(n * k / 2));
  for (auto& v : m.w) v = static_cast<std::uint8_t>(rng());
  std::normal_distribution<float> nd(0.0f, 0.01f);
  m.s.resize(static_cast<std::size_t>(n * k / kGs));
  m.b.resize(m.s.size());
  for (auto& v : m.s) v = nd(rng);
  for (auto& v : m.b) v = nd(rng) * 8;
  return m;
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// x' for the nibble decoder: per 16 elements, the even ones then the odd ones.
std::vector<float> permute16(const float* x, std::int64_t k) {
  std::vector<float> p(static_cast<std::size_t>(k));
  for (std::int64_t b = 0; b < k; b += 16)
    for (int j = 0; j < 8; ++j) {
      p[b + j] = x[b + 2 * j];
      p[b + 8 + j] = x[b + 2 * j + 1];
    }
  return p;
}

std::vector<float> group_sums(const float* x, std::int64_t k) {
  std::vector<float> s(static_cast<std::size_t>(k / kGs), 0.0f);
  for (std::int64_t j = 0; j < k; ++j) s[j / kGs] += x[j];
  return s;
}

struct Dec16 {  // v2: 8 bytes -> 16 nibbles, [even | odd]
  static void q(const std::uint8_t* p, __m256& lo, __m256& hi) {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(15)));
    hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
  }
};
struct DecWord {  // v1: two words -> 16 nibbles in natural order
  static void q(const std::uint8_t* p, __m256& lo, __m256& hi) {
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i m = _mm256_set1_epi32(15);
    const auto* w = reinterpret_cast<const std::uint32_t*>(p);
    lo = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w[0])), sh), m));
    hi = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(w[1])), sh), m));
  }
};

// MR x NR tile, acc in a small array updated once per group.
template <int MR, int NR, class Dec>
void tile(const Mat& W, std::int64_t n0, const float* xp, const float* xs, std::int64_t ldx,
          float* y, std::int64_t ldy) {
  const std::int64_t k = W.k, groups = k / kGs, rb = k / 2;
  alignas(32) float acc[MR][NR][8] = {};
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256 d[MR][NR];
    for (int blk = 0; blk < kGs / 16; ++blk) {
      const std::int64_t e = g * kGs + blk * 16;
      for (int n = 0; n < NR; ++n) {
        __m256 lo, hi;
        Dec::q(&W.w[(n0 + n) * rb + e / 2], lo, hi);
        for (int m = 0; m < MR; ++m) {
          const __m256 xl = _mm256_loadu_ps(xp + m * ldx + e);
          const __m256 xh = _mm256_loadu_ps(xp + m * ldx + e + 8);
          d[m][n] = blk == 0 ? _mm256_mul_ps(xl, lo) : _mm256_fmadd_ps(xl, lo, d[m][n]);
          d[m][n] = _mm256_fmadd_ps(xh, hi, d[m][n]);
        }
      }
    }
    for (int n = 0; n < NR; ++n) {
      const __m256 s = _mm256_broadcast_ss(&W.s[(n0 + n) * groups + g]);
      for (int m = 0; m < MR; ++m)
        _mm256_store_ps(acc[m][n], _mm256_fmadd_ps(s, d[m][n], _mm256_load_ps(acc[m][n])));
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int n = 0; n < NR; ++n) {
      float t = hsum(_mm256_load_ps(acc[m][n]));
      for (std::int64_t g = 0; g < groups; ++g) t += W.b[(n0 + n) * groups + g] * xs[m * groups + g];
      y[m * ldy + n0 + n] = t;
    }
}

// v3: 1x4, acc in registers.
void tile_v3(const Mat& W, std::int64_t n0, const float* xp, const float* xs, std::int64_t,
             float* y, std::int64_t) {
  const std::int64_t k = W.k, groups = k / kGs, rb = k / 2;
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256 d[4];
    for (int blk = 0; blk < kGs / 16; ++blk) {
      const std::int64_t e = g * kGs + blk * 16;
      const __m256 xl = _mm256_loadu_ps(xp + e), xh = _mm256_loadu_ps(xp + e + 8);
      for (int n = 0; n < 4; ++n) {
        __m256 lo, hi;
        Dec16::q(&W.w[(n0 + n) * rb + e / 2], lo, hi);
        d[n] = blk == 0 ? _mm256_mul_ps(xl, lo) : _mm256_fmadd_ps(xl, lo, d[n]);
        d[n] = _mm256_fmadd_ps(xh, hi, d[n]);
      }
    }
    for (int n = 0; n < 4; ++n)
      acc[n] = _mm256_fmadd_ps(_mm256_broadcast_ss(&W.s[(n0 + n) * groups + g]), d[n], acc[n]);
  }
  for (int n = 0; n < 4; ++n) {
    float t = hsum(acc[n]);
    for (std::int64_t g = 0; g < groups; ++g) t += W.b[(n0 + n) * groups + g] * xs[g];
    y[n0 + n] = t;
  }
}

using TileFn = void (*)(const Mat&, std::int64_t, const float*, const float*, std::int64_t, float*,
                        std::int64_t);

int g_threads = 2;

// Runs fn over m-tiles of mr rows and n-tiles of nr rows, split over g_threads threads by n.
void run(TileFn fn, int mr, int nr, const Mat& W, const float* xp, const float* xs, std::int64_t m,
         float* y) {
  const std::int64_t tiles = W.n / nr, groups = W.k / kGs;
  auto part = [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t i = 0; i < m; i += mr)
      for (std::int64_t t = t0; t < t1; ++t)
        fn(W, t * nr, xp + i * W.k, xs + i * groups, W.k, y + i * W.n, W.n);
  };
  if (g_threads == 1) return part(0, tiles);
  std::thread th(part, tiles / 2, tiles);
  part(0, tiles / 2);
  th.join();
}

double check(const Mat& W, const std::vector<float>& x, std::int64_t m, const std::vector<float>& y) {
  const std::int64_t groups = W.k / kGs;
  double worst = 0;
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t n = 0; n < W.n; n += 97) {
      double s = 0, a = 0;
      for (std::int64_t j = 0; j < W.k; ++j) {
        const int q = (W.w[(n * W.k + j) / 2] >> (4 * (j & 1))) & 15;
        const double w = double(W.s[n * groups + j / kGs]) * q + W.b[n * groups + j / kGs];
        s += w * x[i * W.k + j];
        a += std::fabs(w * x[i * W.k + j]);
      }
      worst = std::max(worst, std::fabs(s - y[i * W.n + n]) / (a * 1e-6 + 1e-30));
    }
  return worst;  // in units of 1e-6 of Σ|w x|
}

void sweep(const char* name, TileFn fn, int mr, int nr, bool perm, std::int64_t m, std::int64_t n,
           std::int64_t k, int reps) {
  Mat W = make_mat(n, k, 1);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(static_cast<std::size_t>(m * k)), xp, xs, y(static_cast<std::size_t>(m * n));
  for (auto& v : x) v = nd(rng);
  for (std::int64_t i = 0; i < m; ++i) {
    auto p = perm ? permute16(&x[i * k], k) : std::vector<float>(x.begin() + i * k, x.begin() + (i + 1) * k);
    auto s = group_sums(&x[i * k], k);
    xp.insert(xp.end(), p.begin(), p.end());
    xs.insert(xs.end(), s.begin(), s.end());
  }
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    run(fn, mr, nr, W, xp.data(), xs.data(), m, y.data());
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  const double bytes = double(W.w.size()) + 4.0 * double(W.s.size()) / 2;  // bf16 scales+biases
  std::printf("%-34s M=%-4lld N=%-6lld K=%-5lld %8.3f ms %7.2f GB/s %7.1f GFLOP/s  err %.3g\n", name,
              (long long)m, (long long)n, (long long)k, med * 1e3, bytes / med * 1e-9,
              2.0 * m * n * k / med * 1e-9, check(W, x, m, y));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 21;
  if (argc > 2) g_threads = std::atoi(argv[2]);
  for (std::int64_t n : {4096, 16384}) {
    sweep("v1 1x8 word-shift", tile<1, 8, DecWord>, 1, 8, false, 1, n, 4096, reps);
    sweep("v2 1x8 zx-nibble", tile<1, 8, Dec16>, 1, 8, true, 1, n, 4096, reps);
    sweep("v2b 1x4 zx-nibble", tile<1, 4, Dec16>, 1, 4, true, 1, n, 4096, reps);
    sweep("v3 1x4 zx-nibble acc-in-reg", tile_v3, 1, 4, true, 1, n, 4096, reps);
  }
  sweep("v4 4x2 zx-nibble", tile<4, 2, Dec16>, 4, 2, true, 128, 2048, 2048, 5);
  sweep("v5 3x3 zx-nibble", tile<3, 3, Dec16>, 3, 3, true, 129, 2049, 2048, 5);
  sweep("v6 2x4 zx-nibble", tile<2, 4, Dec16>, 2, 4, true, 128, 2048, 2048, 5);
  sweep("v7 4x3 zx-nibble", tile<4, 3, Dec16>, 4, 3, true, 128, 2049, 2048, 5);
  sweep("v8 3x4 zx-nibble", tile<3, 4, Dec16>, 3, 4, true, 129, 2048, 2048, 5);
  sweep("v5 3x3 zx-nibble", tile<3, 3, Dec16>, 3, 3, true, 129, 2049, 2048, 5);
  return 0;
}
