#include "backend/cpu/qmatmul.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/dot_kernels.h"
#include "backend/cpu/kernel_util.h"
#include "backend/cpu/matmul.h"
#include "core/error.h"

namespace mlxcel::cpu {
namespace {

float load_scale(const void* p, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16:
      return static_cast<const bf16*>(p)[i].to_float();
    case DType::kF16:
      return static_cast<const f16*>(p)[i].to_float();
    default:
      return static_cast<const float*>(p)[i];
  }
}

// fp-mode scales and elements as quant::decode_fp_scale / decode_fp_elem give them: the codes
// MLX turns into inf / NaN (E8M0 255, E4M3 0x7F / 0xFF) decode to 0.
float fp_scale(QMode m, std::uint8_t s) {
  if (m == QMode::kNvfp4) return (s & 0x7F) == 0x7F ? 0.0f : fp8_e4m3_to_float(s);
  return s == 0xFF ? 0.0f : fp8_e8m0_to_float(s);
}

float fp_elem(QMode m, std::uint32_t code) {
  if (m == QMode::kMxfp8)
    return (code & 0x7F) == 0x7F ? 0.0f : fp8_e4m3_to_float(static_cast<std::uint8_t>(code));
  return fp4_e2m1_to_float(static_cast<std::uint8_t>(code));
}

// All 256 fp-mode scale bytes decoded (one table per mode, built on first use, then read-only).
struct FpScales {
  float scale[256];
};
const FpScales& fp_scales(QMode m) {
  static const auto make = [](QMode mode) {
    FpScales t;
    for (int i = 0; i < 256; ++i) t.scale[i] = fp_scale(mode, static_cast<std::uint8_t>(i));
    return t;
  };
  static const FpScales mx = make(QMode::kMxfp4), nv = make(QMode::kNvfp4);
  return m == QMode::kNvfp4 ? nv : mx;
}

// n values of dtype t from p[offset] as fp32.
void to_f32(const void* p, DType t, std::int64_t offset, std::int64_t n, float* out,
            bool use_avx2) {
  const void* src = static_cast<const char*>(p) + offset * static_cast<std::int64_t>(dtype_size(t));
  if (use_avx2)
    avx2::convert_to_f32(src, t, out, n);
  else
    detail::load_f32(src, t, out, n);
}

// Element j of a packed row: LSB-first bitstream, values may straddle words (3/5/6-bit),
// MLX_FORMATS.md §1.2.
std::uint32_t code_at(const std::uint32_t* w, std::int64_t j, int bits) {
  const std::uint64_t bit = static_cast<std::uint64_t>(j) * static_cast<std::uint64_t>(bits);
  const std::uint64_t wi = bit >> 5, sh = bit & 31;
  std::uint64_t v = w[wi] >> sh;
  if (sh + static_cast<std::uint64_t>(bits) > 32)
    v |= static_cast<std::uint64_t>(w[wi + 1]) << (32 - sh);
  return static_cast<std::uint32_t>(v & ((1ull << bits) - 1));
}

std::int64_t row_words(const QWeight& q) { return q.k * q.bits / 32; }

// Lane order. The AVX2 decoders fill their 8 lanes in the order the packing makes cheap, and x
// is permuted to match once per call:
// - 4-bit: 8 bytes widened to eight 32-bit lanes, low nibbles (elements 2l) then high nibbles
//   (2l + 1): per 16 elements [0, 2, .., 14, 1, 3, .., 15];
// - 1/2/3/5/6-bit: 8 elements (`bits` bytes) broadcast to four 64-bit lanes shifted by 0..3 and
//   4..7 elements, interleaved: per 8 elements [0, 4, 1, 5, 2, 6, 3, 7];
// - 8-bit: natural order.
// Every path for a mode (fused, predecoded, scalar) uses the mode's one order, so results never
// depend on which path ran.
struct LaneOrder {
  int block = 1;     // elements per permuted block (1: natural order)
  int src[16] = {};  // position p of a block holds element src[p] of the block
};

LaneOrder lane_order(const QWeight& q) {
  LaneOrder o;
  if (q.bits == 4) {
    o.block = 16;
    for (int p = 0; p < 16; ++p) o.src[p] = p < 8 ? 2 * p : 2 * (p - 8) + 1;
  } else if (q.bits != 8) {
    o.block = 8;
    for (int p = 0; p < 8; ++p) o.src[p] = p % 2 ? 4 + p / 2 : p / 2;
  }
  return o;
}

// The exact q values of row r (affine: the code; fp: the element value) in lane order.
void decode_q_row(const QWeight& q, std::int64_t r, float* out) {
  const std::uint32_t* w = q.w + r * row_words(q);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(w);
  const auto value = [&](std::uint32_t c) {
    return q.mode == QMode::kAffine ? static_cast<float>(c) : fp_elem(q.mode, c);
  };
  if (q.bits == 8) {
    for (std::int64_t j = 0; j < q.k; ++j) out[j] = value(bytes[j]);
    return;
  }
  if (q.bits == 4) {  // byte l of a 16-element block: element 2l low, 2l + 1 high
    for (std::int64_t j = 0; j < q.k; j += 16)
      for (int l = 0; l < 8; ++l) {
        out[j + l] = value(bytes[j / 2 + l] & 0xFu);
        out[j + 8 + l] = value(bytes[j / 2 + l] >> 4);
      }
    return;
  }
  // Other widths (affine only): 8 elements fill exactly `bits` bytes (K is a multiple of 32),
  // read as one little-endian integer.
  const LaneOrder o = lane_order(q);
  const std::uint64_t mask = (1ull << q.bits) - 1;
  for (std::int64_t j = 0; j < q.k; j += 8) {
    const std::uint8_t* p = bytes + j / 8 * q.bits;
    std::uint64_t v = 0;
    for (int b = 0; b < q.bits; ++b) v |= static_cast<std::uint64_t>(p[b]) << (8 * b);
    for (int l = 0; l < 8; ++l)
      out[j + l] = static_cast<float>(static_cast<std::int32_t>((v >> (o.src[l] * q.bits)) & mask));
  }
}

void decode_row_scalar(const QWeight& q, std::int64_t r, float* out) {
  const std::uint32_t* w = q.w + r * row_words(q);
  const std::int64_t groups = q.k / q.group_size;
  for (std::int64_t g = 0; g < groups; ++g) {
    float s, b = 0.0f;
    if (q.mode == QMode::kAffine) {
      s = load_scale(q.scales, q.scales_dtype, r * groups + g);
      b = load_scale(q.biases, q.scales_dtype, r * groups + g);
    } else {
      s = fp_scale(q.mode, static_cast<const std::uint8_t*>(q.scales)[r * groups + g]);
    }
    for (std::int64_t j = g * q.group_size; j < (g + 1) * q.group_size; ++j) {
      const std::uint32_t c = code_at(w, j, q.bits);
      if (q.mode == QMode::kAffine)
        out[j] = static_cast<float>(c) * s + b;  // unfused, as the reference
      else
        out[j] = fp_elem(q.mode, c) * s;
    }
  }
}

void validate(const QWeight& q, std::int64_t m, const float* x, const float* y) {
  const bool fp = q.mode != QMode::kAffine;
  const bool ok_bits = fp ? (q.mode == QMode::kMxfp8 ? q.bits == 8 : q.bits == 4)
                          : (q.bits >= 1 && q.bits <= 8 && q.bits != 7);
  MLXCEL_CHECK(ok_bits && q.group_size >= 16 && q.group_size % 16 == 0 && q.n >= 0 && q.k >= 0 &&
                   q.k % q.group_size == 0 && (q.k * q.bits) % 32 == 0 && m >= 0,
               ErrorCategory::kInternal,
               "qmatmul: unsupported layout (mode " + std::to_string(static_cast<int>(q.mode)) +
                   ", bits " + std::to_string(q.bits) + ", group_size " +
                   std::to_string(q.group_size) + ", k " + std::to_string(q.k) + ")");
  MLXCEL_CHECK((q.w && q.scales && (fp || q.biases) && x && y) || m * q.n * q.k == 0,
               ErrorCategory::kInternal, "qmatmul: null pointer");
}

// The scalar twin of avx2::qdot_rows over predecoded q values (kF32): the same lanes, groups and
// reduction tree, with a separate multiply and add.
void qdot_rows_scalar(const QDotArgs& a) {
  const int gs = a.group_size;
  for (std::int64_t j = 0; j < a.nrows; ++j) {
    const float* w = reinterpret_cast<const float*>(a.w + j * a.w_stride);
    for (std::int64_t i = 0; i < a.mr; ++i) {
      const float* x = a.x + i * a.ldx;
      float acc[kLanes] = {};
      for (std::int64_t g = 0; g < a.groups; ++g) {
        const std::int64_t e0 = g * gs;
        float d[kLanes];
        for (int l = 0; l < kLanes; ++l) d[l] = x[e0 + l] * w[e0 + l];
        for (std::int64_t e = e0 + kLanes; e < e0 + gs; e += kLanes)
          for (int l = 0; l < kLanes; ++l) d[l] = d[l] + x[e + l] * w[e + l];
        const float s = a.scales[j * a.groups + g];
        for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] + s * d[l];
      }
      if (a.biases) {
        for (std::int64_t g = 0; g < a.groups; g += kLanes)
          for (int l = 0; l < kLanes && g + l < a.groups; ++l)
            acc[l] = acc[l] + a.biases[j * a.groups + g + l] * a.xsum[i * a.groups8 + g + l];
      }
      float v = hsum8(acc);
      if (a.bias) v += a.bias[j];
      a.y[i * a.ldy + j] = v;
    }
  }
}

// Which fused decoder AVX2 runs for a mode.
QDecode fused_decoder(const QWeight& q) {
  switch (q.mode) {
    case QMode::kAffine:
      return q.bits == 4 ? QDecode::kNib4 : q.bits == 8 ? QDecode::kByte : QDecode::kBits;
    case QMode::kMxfp8:
      return QDecode::kFp8;
    default:
      return QDecode::kFp4;
  }
}

void run(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y, CpuIsa isa,
         ThreadPool* pool_ptr, bool allow_fused) {
  validate(q, m, x, y);
  if (m == 0 || q.n == 0) return;
  const bool use_avx2 = isa == CpuIsa::kAvx2;
  MLXCEL_CHECK(!use_avx2 || isa_supported(isa), ErrorCategory::kUnsupported,
               "qmatmul: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  ThreadPool& pool = pool_or_default(pool_ptr);
  const std::int64_t k = q.k, n = q.n;
  const std::int64_t groups = k / q.group_size, groups8 = detail::ceil_div(groups, kLanes) * kLanes;
  const bool affine = q.mode == QMode::kAffine;
  const QDecode dec = use_avx2 && allow_fused ? fused_decoder(q) : QDecode::kF32;

  // x in lane order, and for affine the per-group sums of x (sequential fp32, zero-padded).
  std::vector<float> xp, xsum;
  const float* xl = x;
  if (const LaneOrder o = lane_order(q); o.block > 1) {
    xp.resize(static_cast<std::size_t>(m * k));
    for (std::int64_t i = 0; i < m * k; i += o.block)
      for (int p = 0; p < o.block; ++p) xp[i + p] = x[i + o.src[p]];
    xl = xp.data();
  }
  if (affine) {
    xsum.assign(static_cast<std::size_t>(m * groups8), 0.0f);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t g = 0; g < groups; ++g) {
        float s = 0.0f;
        for (std::int64_t j = g * q.group_size; j < (g + 1) * q.group_size; ++j) s += x[i * k + j];
        xsum[i * groups8 + g] = s;
      }
  }

  // Predecoded rows cost 4 bytes per element: keep a chunk's worth within 512 KiB.
  const std::int64_t max_chunk =
      dec == QDecode::kF32
          ? std::clamp<std::int64_t>((131072 / std::max<std::int64_t>(k, 1)) / 8 * 8, 8,
                                     kMaxRowsPerCall)
          : kMaxRowsPerCall;
  const WorkSplit ws = split_work(m, n, max_chunk, pool.size());
  const FpScales& lut = fp_scales(q.mode);
  const std::int64_t mt = m_tile(m);
  const std::int64_t row_bytes = k * q.bits / 8;
  pool.parallel_for(ws.n_chunks * ws.m_blocks, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<float> scales(static_cast<std::size_t>(ws.n_chunk * groups));
    std::vector<float> biases(affine ? static_cast<std::size_t>(ws.n_chunk * groups) : 0);
    std::vector<float> qrows(dec == QDecode::kF32 ? static_cast<std::size_t>(ws.n_chunk * k) : 0);
    for (std::int64_t t = t0; t < t1; ++t) {
      const std::int64_t n0 = (t % ws.n_chunks) * ws.n_chunk, n1 = std::min(n, n0 + ws.n_chunk);
      const std::int64_t m0 = (t / ws.n_chunks) * ws.m_block, m1 = std::min(m, m0 + ws.m_block);
      // Group parameters of the chunk's rows as fp32 (rows are contiguous in scales / biases).
      const std::int64_t rows = n1 - n0;
      if (affine) {
        to_f32(q.scales, q.scales_dtype, n0 * groups, rows * groups, scales.data(), use_avx2);
        to_f32(q.biases, q.scales_dtype, n0 * groups, rows * groups, biases.data(), use_avx2);
      } else {
        const auto* sb = static_cast<const std::uint8_t*>(q.scales) + n0 * groups;
        for (std::int64_t i = 0; i < rows * groups; ++i) scales[i] = lut.scale[sb[i]];
      }
      if (dec == QDecode::kF32)
        for (std::int64_t r = n0; r < n1; ++r) decode_q_row(q, r, qrows.data() + (r - n0) * k);
      QDotArgs a;
      a.decode = dec;
      a.bits = q.bits;
      if (dec == QDecode::kF32) {
        a.w = reinterpret_cast<const std::uint8_t*>(qrows.data());
        a.w_stride = k * static_cast<std::int64_t>(sizeof(float));
      } else {
        a.w = reinterpret_cast<const std::uint8_t*>(q.w) + n0 * row_bytes;
        a.w_stride = row_bytes;
      }
      a.scales = scales.data();
      a.biases = affine ? biases.data() : nullptr;
      a.groups = groups;
      a.groups8 = groups8;
      a.group_size = q.group_size;
      a.ldx = k;
      a.bias = bias ? bias + n0 : nullptr;
      a.ldy = n;
      a.nrows = n1 - n0;
      a.k = k;
      for (std::int64_t i = m0; i < m1; i += mt) {
        a.x = xl + i * k;
        a.xsum = affine ? xsum.data() + i * groups8 : nullptr;
        a.y = y + i * n + n0;
        a.mr = std::min(mt, m1 - i);
        if (use_avx2)
          avx2::qdot_rows(a);
        else
          qdot_rows_scalar(a);
      }
    }
  });
}

}  // namespace

void qdecode_rows(const QWeight& q, std::int64_t r0, std::int64_t r1, float* out, CpuIsa isa) {
  const bool fast =
      isa == CpuIsa::kAvx2 && q.mode == QMode::kAffine && (q.bits == 4 || q.bits == 8);
  for (std::int64_t r = r0; r < r1; ++r) {
    float* o = out + (r - r0) * q.k;
    if (fast) {
      const std::int64_t groups = q.k / q.group_size;
      avx2::decode_affine_row(q.w + r * row_words(q), q.scales, q.biases, q.scales_dtype,
                              r * groups, q.bits, q.group_size, q.k, o);
    } else {
      decode_row_scalar(q, r, o);
    }
  }
}

void qmatmul(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y,
             CpuIsa isa, ThreadPool* pool) {
  run(q, x, m, bias, y, isa, pool, true);
}

void qmatmul_predecoded(const QWeight& q, const float* x, std::int64_t m, const float* bias,
                        float* y, CpuIsa isa, ThreadPool* pool) {
  run(q, x, m, bias, y, isa, pool, false);
}

void qmatmul_unfused(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y,
                     CpuIsa isa, ThreadPool* pool) {
  validate(q, m, x, y);
  const std::int64_t rows = std::max<std::int64_t>(
      8, std::min<std::int64_t>(64, (1 << 17) / std::max<std::int64_t>(1, q.k)));
  const std::int64_t tiles = detail::ceil_div(q.n, rows);
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
