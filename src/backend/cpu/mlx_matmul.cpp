#include "backend/cpu/mlx_matmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/mlx_compat.h"
#include "core/error.h"

namespace mlxcel::cpu {
namespace {

float load_scale(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return static_cast<const bf16*>(p)[i].to_float();
    case DType::kF16: return static_cast<const f16*>(p)[i].to_float();
    default: return static_cast<const float*>(p)[i];
  }
}

// Element j of a row in MLX's LSB-first bitstream (values may straddle words: 3/5/6 bits).
std::uint32_t code_at(const std::uint32_t* row, std::int64_t j, int bits) {
  const std::uint64_t bit = static_cast<std::uint64_t>(j) * static_cast<std::uint64_t>(bits);
  const std::uint64_t wi = bit >> 5, sh = bit & 31;
  std::uint64_t v = row[wi] >> sh;
  if (sh + static_cast<std::uint64_t>(bits) > 32) v |= static_cast<std::uint64_t>(row[wi + 1]) << (32 - sh);
  return static_cast<std::uint32_t>(v & ((1ull << bits) - 1));
}

// The scale of an fp-mode group as MLX's dequantize_scale<T> gives it: E4M3 for nvfp4
// (group 16), otherwise the E8M0 byte placed in a bfloat16's exponent (0 -> 2^-127), then T.
float fp_scale(QMode mode, std::uint8_t s, DType act) {
  float v = mode == QMode::kNvfp4 ? fp8_e4m3_to_float(s) : fp8_e8m0_to_float(s);
  return mlx_compat::round_to(act, v);
}

// Decodes rows [r0, r0 + 8) into the lane-interleaved tile wt[k * 8 + lane] (values already in
// T, as MLX computes them) and, for the fp modes, the group scales st[g * 8 + lane]. Rows past
// q.n are zero.
void fill_tile(const QWeight& q, std::int64_t r0, DType act, float* wt, float* st) {
  const std::int64_t words = q.k * q.bits / 32, groups = q.k / q.group_size;
  for (std::int64_t lane = 0; lane < kMlxQmmTile; ++lane) {
    const std::int64_t r = r0 + lane;
    if (r >= q.n) {
      for (std::int64_t j = 0; j < q.k; ++j) wt[j * kMlxQmmTile + lane] = 0.0f;
      if (q.mode != QMode::kAffine)
        for (std::int64_t g = 0; g < groups; ++g) st[g * kMlxQmmTile + lane] = 0.0f;
      continue;
    }
    const std::uint32_t* row = q.w + r * words;
    for (std::int64_t g = 0; g < groups; ++g) {
      float s = 0.0f, b = 0.0f;
      if (q.mode == QMode::kAffine) {
        s = load_scale(q.scales, q.scales_dtype, r * groups + g);
        b = load_scale(q.biases, q.scales_dtype, r * groups + g);
      } else {
        st[g * kMlxQmmTile + lane] =
            fp_scale(q.mode, static_cast<const std::uint8_t*>(q.scales)[r * groups + g], act);
      }
      for (std::int64_t j = g * q.group_size; j < (g + 1) * q.group_size; ++j) {
        const std::uint32_t c = code_at(row, j, q.bits);
        float v;
        if (q.mode == QMode::kAffine) {
          v = mlx_compat::round_to(act, mlx_compat::round_to(act, s * static_cast<float>(c)) + b);
        } else if (q.mode == QMode::kMxfp8) {
          v = mlx_compat::round_to(act, fp8_e4m3_to_float(static_cast<std::uint8_t>(c)));
        } else {
          v = mlx_compat::round_to(act, fp4_e2m1_to_float(static_cast<std::uint8_t>(c)));
        }
        wt[j * kMlxQmmTile + lane] = v;
      }
    }
  }
}

// The scalar chains; lanes are independent outputs.
void tile_rows_scalar(const QWeight& q, const float* wt, const float* st, const float* x,
                      DType act, float* out) {
  const std::int64_t groups = q.k / q.group_size;
  for (std::int64_t lane = 0; lane < kMlxQmmTile; ++lane) {
    float sum = 0.0f;
    if (q.mode == QMode::kAffine) {
      for (std::int64_t j = 0; j < q.k; ++j)
        sum = mlx_compat::round_to(act, sum + mlx_compat::round_to(act, x[j] * wt[j * kMlxQmmTile + lane]));
    } else {
      for (std::int64_t g = 0; g < groups; ++g) {
        float gs = 0.0f;
        for (std::int64_t j = g * q.group_size; j < (g + 1) * q.group_size; ++j)
          gs = mlx_compat::round_to(act, gs + mlx_compat::round_to(act, x[j] * wt[j * kMlxQmmTile + lane]));
        sum = mlx_compat::round_to(act, sum + mlx_compat::round_to(act, st[g * kMlxQmmTile + lane] * gs));
      }
    }
    out[lane] = sum;
  }
}

// Dense rows [r0, r0 + 8) into the lane-interleaved tile, widened to fp32 (rows past n: zero).
void fill_dense_tile(const void* w, DType t, std::int64_t n, std::int64_t k, std::int64_t r0,
                     float* wt) {
  for (std::int64_t lane = 0; lane < kMlxQmmTile; ++lane) {
    const std::int64_t r = r0 + lane;
    for (std::int64_t j = 0; j < k; ++j)
      wt[j * kMlxQmmTile + lane] = r < n ? load_scale(w, t, r * k + j) : 0.0f;
  }
}

}  // namespace

void matmul_mlx(const float* x, std::int64_t m, const void* w, DType w_dtype, std::int64_t n,
                std::int64_t k, float* y, CpuIsa isa, ThreadPool* pool) {
  const bool use_avx2 = isa == CpuIsa::kAvx2;
  const std::int64_t tiles = (n + kMlxQmmTile - 1) / kMlxQmmTile;
  pool_or_default(pool).parallel_for(tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> wt(static_cast<std::size_t>(k * kMlxQmmTile));
    float out[kMlxQmmTile];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t r0 = t * kMlxQmmTile;
      fill_dense_tile(w, w_dtype, n, k, r0, wt.data());
      for (std::int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * k;
        if (use_avx2) {
          avx2::qmm_mlx_tile(wt.data(), nullptr, xr, k, 1, DType::kF32, out);
        } else {
          for (std::int64_t lane = 0; lane < kMlxQmmTile; ++lane) {
            float s = 0.0f;
            for (std::int64_t j = 0; j < k; ++j) s = s + xr[j] * wt[j * kMlxQmmTile + lane];
            out[lane] = s;
          }
        }
        const std::int64_t n_here = std::min(kMlxQmmTile, n - r0);
        std::copy(out, out + n_here, y + i * n + r0);
      }
    }
  });
}

void qmatmul_mlx(const QWeight& q, const float* x, std::int64_t m, DType act, float* y,
                 CpuIsa isa, ThreadPool* pool) {
  MLXCEL_CHECK(act == DType::kF32 || act == DType::kBF16 || act == DType::kF16,
               ErrorCategory::kInternal, "qmatmul_mlx: activation dtype must be F32/F16/BF16");
  const bool use_avx2 = isa == CpuIsa::kAvx2;
  const std::int64_t tiles = (q.n + kMlxQmmTile - 1) / kMlxQmmTile;
  const std::int64_t groups = q.k / q.group_size;
  pool_or_default(pool).parallel_for(tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> wt(static_cast<std::size_t>(q.k * kMlxQmmTile));
    std::vector<float> st(static_cast<std::size_t>(groups * kMlxQmmTile));
    float out[kMlxQmmTile];
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t r0 = t * kMlxQmmTile;
      fill_tile(q, r0, act, wt.data(), st.data());
      for (std::int64_t i = 0; i < m; ++i) {
        const float* xr = x + i * q.k;
        if (use_avx2) {
          avx2::qmm_mlx_tile(wt.data(), q.mode == QMode::kAffine ? nullptr : st.data(), xr, q.k,
                             q.group_size, act, out);
        } else {
          tile_rows_scalar(q, wt.data(), st.data(), xr, act, out);
        }
        const std::int64_t n_here = std::min(kMlxQmmTile, q.n - r0);
        std::copy(out, out + n_here, y + i * q.n + r0);
      }
    }
  });
}

}  // namespace mlxcel::cpu
