// AVX2/FMA fused dequant + dot for MLX-quantized rows: the row-stable chain of
// backend/cpu/dot_kernels.h over MR x NR register tiles, with W decoded in registers (each
// decoded vector serves MR rows of x) and the group accumulators folded into a small stack
// buffer once per group. Built with -ffp-contract=off: the only fused operations are the
// explicit _mm256_fmadd_ps.
#include <algorithm>
#include <cstring>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/avx2/simd.h"

namespace mlxcel::cpu::avx2 {
namespace {

// Decoders: Vecs vectors of q values for the Elems elements starting at element e of a row.
struct DecF32 {  // predecoded fp32 q values
  static constexpr int kElems = 8, kVecs = 1;
  static std::int64_t bytes(std::int64_t e) { return 4 * e; }
  static void load(const std::uint8_t* row, std::int64_t e, __m256* q) {
    q[0] = _mm256_loadu_ps(reinterpret_cast<const float*>(row) + e);
  }
};

// 8 bytes, each widened to a 32-bit lane: 16 nibbles (low = even elements, high = odd) or 8 bytes.
inline __m256i widen8(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

struct DecNib4 {  // affine 4-bit codes, lanes [even | odd]
  static constexpr int kElems = 16, kVecs = 2;
  static std::int64_t bytes(std::int64_t e) { return e / 2; }
  static void load(const std::uint8_t* row, std::int64_t e, __m256* q) {
    const __m256i v = widen8(row + e / 2);
    q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF)));
    q[1] = _mm256_cvtepi32_ps(_mm256_srli_epi32(v, 4));
  }
};

struct DecByte {  // affine 8-bit codes
  static constexpr int kElems = 8, kVecs = 1;
  static std::int64_t bytes(std::int64_t e) { return e; }
  static void load(const std::uint8_t* row, std::int64_t e, __m256* q) {
    q[0] = _mm256_cvtepi32_ps(widen8(row + e));
  }
};

// Affine B-bit codes (B = 1, 2, 3, 5, 6): 8 elements are exactly B bytes. Shifting four copies
// of them by 0..3 and by 4..7 elements and interleaving the low halves gives lanes
// [0, 4, 1, 5, 2, 6, 3, 7].
template <int B>
struct DecBits {
  static constexpr int kElems = 8, kVecs = 1;
  static std::int64_t bytes(std::int64_t e) { return e / 8 * B; }
  // Exactly the chunk's B bytes (never past the row), as whole 1/2/4-byte loads: assembling them
  // through memory (memcpy into a zeroed u64) stalls store forwarding and halves the speed.
  static std::uint64_t read(const std::uint8_t* p) {
    const auto u16 = [](const std::uint8_t* q) {
      std::uint16_t v;
      std::memcpy(&v, q, 2);
      return std::uint64_t{v};
    };
    const auto u32 = [](const std::uint8_t* q) {
      std::uint32_t v;
      std::memcpy(&v, q, 4);
      return std::uint64_t{v};
    };
    if constexpr (B == 1)
      return p[0];
    else if constexpr (B == 2)
      return u16(p);
    else if constexpr (B == 3)
      return u16(p) | std::uint64_t{p[2]} << 16;
    else if constexpr (B == 5)
      return u32(p) | std::uint64_t{p[4]} << 32;
    else
      return u32(p) | u16(p + 4) << 32;
  }
  static void load(const std::uint8_t* row, std::int64_t e, __m256* q) {
    const __m256i w = _mm256_set1_epi64x(static_cast<long long>(read(row + bytes(e))));
    const __m256i lo = _mm256_srlv_epi64(w, _mm256_setr_epi64x(0, B, 2 * B, 3 * B));
    const __m256i hi = _mm256_srlv_epi64(w, _mm256_setr_epi64x(4 * B, 5 * B, 6 * B, 7 * B));
    const __m256i both = _mm256_blend_epi32(lo, _mm256_slli_epi64(hi, 32), 0xAA);
    q[0] = _mm256_cvtepi32_ps(_mm256_and_si256(both, _mm256_set1_epi32((1 << B) - 1)));
  }
};

// E2M1: the magnitude {0, .5, 1, 1.5, 2, 3, 4, 6} by the low 3 bits (vpermps reads only those),
// the sign from bit 3.
struct DecFp4 {
  static constexpr int kElems = 16, kVecs = 2;
  static std::int64_t bytes(std::int64_t e) { return e / 2; }
  static void load(const std::uint8_t* row, std::int64_t e, __m256* q) {
    const __m256 lut = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
    const __m256i v = widen8(row + e / 2);
    const __m256i s0 = _mm256_and_si256(_mm256_slli_epi32(v, 28), sign);
    const __m256i s1 = _mm256_and_si256(_mm256_slli_epi32(v, 24), sign);
    q[0] = _mm256_xor_ps(_mm256_permutevar8x32_ps(lut, v), _mm256_castsi256_ps(s0));
    q[1] = _mm256_xor_ps(_mm256_permutevar8x32_ps(lut, _mm256_srli_epi32(v, 4)),
                         _mm256_castsi256_ps(s1));
  }
};

// E4M3 (bias 7): the 7 magnitude bits placed at the top of an fp32 mantissa give 2^-120 times
// the value, normal or subnormal alike, so one exact multiply by 2^120 finishes it. Codes 0x7F /
// 0xFF (NaN in MLX) decode to +0 as quant::decode_fp_elem does.
struct DecFp8 {
  static constexpr int kElems = 8, kVecs = 1;
  static std::int64_t bytes(std::int64_t e) { return e; }
  static void load(const std::uint8_t* row, std::int64_t e, __m256* q) {
    const __m256i nan_bits = _mm256_set1_epi32(0x07F00000);
    const __m256i v = widen8(row + e);
    const __m256i mag = _mm256_and_si256(_mm256_slli_epi32(v, 20), nan_bits);
    const __m256i sign = _mm256_and_si256(_mm256_slli_epi32(v, 24),
                                          _mm256_set1_epi32(static_cast<int>(0x80000000u)));
    const __m256 val = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(0x1p120f));
    const __m256 is_nan = _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, nan_bits));
    q[0] = _mm256_andnot_ps(is_nan, _mm256_or_ps(val, _mm256_castsi256_ps(sign)));
  }
};

// W rows per register tile for MR rows of x (MR * NR group accumulators in registers).
template <int MR>
constexpr int kNr = MR == 1   ? 8
                    : MR == 4 ? 2
                              : 4;

// One block of Dec::kElems elements at e: d[i][j] (+)= x_i · q_j. The group's first block
// multiplies (kFirst), the others accumulate, vector by vector in lane order.
template <int MR, int NR, class Dec, bool kFirst>
inline void block(const QDotArgs& a, const std::uint8_t* w, std::int64_t e, __m256 (&d)[MR][NR]) {
  for (int j = 0; j < NR; ++j) {
    __m256 q[Dec::kVecs];
    Dec::load(w + j * a.w_stride, e, q);
    for (int i = 0; i < MR; ++i) {
      const float* x = a.x + i * a.ldx + e;
      for (int v = 0; v < Dec::kVecs; ++v) {
        const __m256 xv = _mm256_loadu_ps(x + 8 * v);
        d[i][j] = kFirst && v == 0 ? _mm256_mul_ps(xv, q[v]) : _mm256_fmadd_ps(xv, q[v], d[i][j]);
      }
    }
  }
}

// Groups [g0, g1) of W rows [j0, j0 + NR): acc[(j * MR + i) * 8] = fma(scale_g, d, acc) per group.
template <int MR, int NR, class Dec>
void tile(const QDotArgs& a, std::int64_t j0, std::int64_t g0, std::int64_t g1, float* acc) {
  const std::uint8_t* w = a.w + j0 * a.w_stride;
  const int gs = a.group_size;
  for (std::int64_t g = g0; g < g1; ++g) {
    __m256 d[MR][NR];
    const std::int64_t e0 = g * gs;
    // The next NR rows' stretch of this group: short rows (K = 1024 is 512 bytes at 4 bits) give
    // the hardware prefetchers too little of a stream to lock on before the next rows start
    // (Qwen3-0.6B's lm_head: 1.7x faster with this, dev/NOTES.md).
    for (int j = 0; j < NR; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(w + (NR + j) * a.w_stride + Dec::bytes(e0)),
                   _MM_HINT_T0);
    block<MR, NR, Dec, true>(a, w, e0, d);
    for (std::int64_t e = e0 + Dec::kElems; e < e0 + gs; e += Dec::kElems)
      block<MR, NR, Dec, false>(a, w, e, d);
    for (int j = 0; j < NR; ++j) {
      const __m256 s = _mm256_broadcast_ss(a.scales + (j0 + j) * a.groups + g);
      for (int i = 0; i < MR; ++i) {
        float* p = acc + ((j0 + j) * MR + i) * 8;
        _mm256_store_ps(p, _mm256_fmadd_ps(s, d[i][j], _mm256_load_ps(p)));
      }
    }
  }
}

template <int MR, class Dec>
void rows(const QDotArgs& a) {
  constexpr int NR = kNr<MR>;
  const std::int64_t gpb = k_block(MR, a.k, a.group_size) / a.group_size;  // groups per k-block
  alignas(32) float acc[kMaxRowsPerCall * MR * 8];
  std::fill(acc, acc + a.nrows * MR * 8, 0.0f);
  for (std::int64_t g0 = 0; g0 < a.groups; g0 += gpb) {
    const std::int64_t g1 = std::min(a.groups, g0 + gpb);
    std::int64_t j = 0;
    for (; j + NR <= a.nrows; j += NR) tile<MR, NR, Dec>(a, j, g0, g1, acc);
    for (; j < a.nrows; ++j) tile<MR, 1, Dec>(a, j, g0, g1, acc);
  }
  for (std::int64_t j = 0; j < a.nrows; ++j)
    for (int i = 0; i < MR; ++i) {
      __m256 c = _mm256_load_ps(acc + (j * MR + i) * 8);
      if (a.biases) {
        const float* b = a.biases + j * a.groups;
        std::int64_t g = 0;
        for (; g + 8 <= a.groups; g += 8)
          c = _mm256_fmadd_ps(_mm256_loadu_ps(b + g), _mm256_loadu_ps(a.xsum + i * a.groups8 + g),
                              c);
        if (g < a.groups) {  // zero lanes past the last group, as xsum's padding
          alignas(32) float tail[8] = {};
          std::copy(b + g, b + a.groups, tail);
          c = _mm256_fmadd_ps(_mm256_load_ps(tail), _mm256_loadu_ps(a.xsum + i * a.groups8 + g), c);
        }
      }
      float v = hsum(c);
      if (a.bias) v += a.bias[j];
      a.y[i * a.ldy + j] = v;
    }
}

template <class Dec>
void rows_dec(const QDotArgs& a) {
  switch (a.mr) {
    case 1:
      rows<1, Dec>(a);
      break;
    case 2:
      rows<2, Dec>(a);
      break;
    case 3:
      rows<3, Dec>(a);
      break;
    default:
      rows<4, Dec>(a);
      break;
  }
}

}  // namespace

void qdot_rows(const QDotArgs& a) {
  switch (a.decode) {
    case QDecode::kNib4:
      rows_dec<DecNib4>(a);
      break;
    case QDecode::kByte:
      rows_dec<DecByte>(a);
      break;
    case QDecode::kFp4:
      rows_dec<DecFp4>(a);
      break;
    case QDecode::kFp8:
      rows_dec<DecFp8>(a);
      break;
    case QDecode::kBits:
      switch (a.bits) {
        case 1:
          rows_dec<DecBits<1>>(a);
          break;
        case 2:
          rows_dec<DecBits<2>>(a);
          break;
        case 3:
          rows_dec<DecBits<3>>(a);
          break;
        case 5:
          rows_dec<DecBits<5>>(a);
          break;
        default:
          rows_dec<DecBits<6>>(a);
          break;
      }
      break;
    default:
      rows_dec<DecF32>(a);
      break;
  }
}

}  // namespace mlxcel::cpu::avx2
