#include "backend/cpu/qmatmul.h"

#include <algorithm>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/matmul.h"

namespace mlxcel::cpu {
namespace {

float load_scale(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return static_cast<const bf16*>(p)[i].to_float();
    case DType::kF16: return static_cast<const f16*>(p)[i].to_float();
    default: return static_cast<const float*>(p)[i];
  }
}

float fp_scale(QMode m, std::uint8_t s) {
  if (m == QMode::kNvfp4) return fp8_e4m3_to_float(s);
  return fp8_e8m0_to_float(s);
}

void decode_row_scalar(const QWeight& q, std::int64_t r, float* out) {
  const std::int64_t words = q.k * q.bits / 32;
  const std::uint32_t* w = q.w + r * words;
  const std::int64_t groups = q.k / q.group_size;
  const std::uint64_t mask = (1ull << q.bits) - 1;
  for (std::int64_t g = 0; g < groups; ++g) {
    float s, b = 0.0f;
    if (q.mode == QMode::kAffine) {
      s = load_scale(q.scales, q.scales_dtype, r * groups + g);
      b = load_scale(q.biases, q.scales_dtype, r * groups + g);
    } else {
      s = fp_scale(q.mode, static_cast<const std::uint8_t*>(q.scales)[r * groups + g]);
    }
    for (std::int64_t j = g * q.group_size; j < (g + 1) * q.group_size; ++j) {
      // LSB-first bitstream, values may straddle words (3/5/6-bit): MLX_FORMATS.md §1.2.
      const std::uint64_t bit = static_cast<std::uint64_t>(j) * q.bits;
      const std::uint64_t wi = bit >> 5, sh = bit & 31;
      std::uint64_t v = w[wi] >> sh;
      if (sh + q.bits > 32) v |= static_cast<std::uint64_t>(w[wi + 1]) << (32 - sh);
      const std::uint32_t code = static_cast<std::uint32_t>(v & mask);
      if (q.mode == QMode::kAffine) {
        out[j] = static_cast<float>(code) * s + b;  // unfused, as the reference
      } else if (q.mode == QMode::kMxfp8) {
        out[j] = fp8_e4m3_to_float(static_cast<std::uint8_t>(code)) * s;
      } else {
        out[j] = fp4_e2m1_to_float(static_cast<std::uint8_t>(code)) * s;
      }
    }
  }
}

}  // namespace

void qdecode_rows(const QWeight& q, std::int64_t r0, std::int64_t r1, float* out, CpuIsa isa) {
  const bool fast = isa == CpuIsa::kAvx2 && q.mode == QMode::kAffine && (q.bits == 4 || q.bits == 8);
  for (std::int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * q.k;
    if (fast) {
      const std::int64_t groups = q.k / q.group_size;
      avx2::decode_affine_row(q.w + r * (q.k * q.bits / 32), q.scales, q.biases, q.scales_dtype,
                              r * groups, q.bits, q.group_size, q.k, o);
    } else {
      decode_row_scalar(q, r, o);
    }
  }
}

void qmatmul(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y,
             CpuIsa isa, ThreadPool* pool) {
  // A tile of rows small enough for L2 at K up to ~16k; several tiles per thread for balance.
  const std::int64_t rows = std::max<std::int64_t>(4, std::min<std::int64_t>(64, (1 << 17) / std::max<std::int64_t>(1, q.k)));
  const std::int64_t tiles = (q.n + rows - 1) / rows;
  pool_or_default(pool).parallel_for(tiles, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> tile(static_cast<std::size_t>(rows * q.k));
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t r0 = t * rows, r1 = std::min(q.n, r0 + rows);
      qdecode_rows(q, r0, r1, tile.data(), isa);
      MatmulArgs a;
      a.x = x;
      a.x_dtype = DType::kF32;
      a.x_row_stride = q.k;
      a.w = tile.data();
      a.w_dtype = DType::kF32;
      a.bias = bias ? bias + r0 : nullptr;
      a.y = y + r0;
      a.y_dtype = DType::kF32;
      a.y_row_stride = q.n;
      a.m = m;
      a.n = r1 - r0;
      a.k = q.k;
      matmul(a, isa, nullptr);  // nested parallel_for runs inline on this worker
    }
  });
}

}  // namespace mlxcel::cpu
