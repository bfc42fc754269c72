#pragma once
// Row-stable dot kernels behind matmul and qmatmul (internal; not a public API).
//
// Row stability: the floating-point operations that produce y[m][n] depend only on x row m and
// W row n, never on M, on which tile or thread computed the output, or on the k-blocking. Each
// kernel call covers `mr` rows of x (1..kMaxMr) against `nrows` rows of W; inside it, every
// output owns one 8-lane fp32 accumulator that sees the same sequence of vector operations
// whatever the register tile (MR x NR) it sits in, and accumulators only travel to memory and
// back between k-blocks (exact). The lane-to-output reduction is one fixed tree (hsum8).
//
// Dense (DotArgs):     acc = Σ_c fma(x[8c..8c+8), w[8c..8c+8), acc) from acc = +0, over the K/8
//                      chunks in order (the last one zero-padded), then y = hsum8(acc) (+ bias).
// Quantized (QDotArgs), per group g of W's row:
//                      d = x'·q over the group's chunks (the first a multiply, then FMAs),
//                      acc = fma(scale_g, d, acc); after the last group, for affine,
//                      acc = fma(bias8, xsum8, acc) per 8 groups (Σ_g bias_g · Σ_{k∈g} x_k),
//                      then y = hsum8(acc) (+ layer bias).
// q are the exact element values (affine: the integer code; fp modes: the E2M1 / E4M3 value),
// so any decoder that yields the same q in the same lane order gives bit-identical results: the
// fused decoders and the predecoded (kF32) path are interchangeable, and the tests check that.
// The scalar twins (matmul.cpp, qmatmul.cpp) run the same lane structure with separate multiply
// and add (baseline x86-64 has no FMA), so they are row-stable too but differ from AVX2 in the
// last bits.
#include <algorithm>
#include <cstdint>

#include "core/dtype.h"

namespace mlxcel::cpu {

inline constexpr int kMaxMr = 4;  // rows of x per kernel call
inline constexpr int kLanes = 8;  // one AVX2 vector of fp32

// x rows of one k-block stay in L1 while the tile's W rows stream past: mr * kc * 4 B <= 16 KiB.
// kc is a multiple of `align` (8, or the quantization group size) and at least one `align`.
inline std::int64_t k_block(std::int64_t mr, std::int64_t k, std::int64_t align) {
  const std::int64_t fit = (16384 / (4 * mr)) / align * align;
  return std::min(std::max(fit, align), std::max(k, align));
}

// The reduction tree of avx2::hsum: lanes l and l + 4, then l and l + 2, then the last pair.
inline float hsum8(const float* a) {
  const float t0 = a[0] + a[4], t1 = a[1] + a[5], t2 = a[2] + a[6], t3 = a[3] + a[7];
  return (t0 + t2) + (t1 + t3);
}

// Most W rows one kernel call covers (its accumulators live on the stack).
inline constexpr std::int64_t kMaxRowsPerCall = 64;

// Rows of x per kernel call: a call with M <= kMaxMr rows reads each W row once for all of them;
// larger M runs 3-row tiles (the last one 1 or 2 rows). Any choice is row-stable.
inline std::int64_t m_tile(std::int64_t m) { return m <= kMaxMr ? m : 3; }

// The work items of one matmul: n_chunks x m_blocks tasks of n_chunk W rows (a multiple of 8,
// at most max_chunk <= kMaxRowsPerCall) by m_block x rows (a multiple of m_tile(m)). Enough items
// for the pool's dynamic scheduling to even out threads that share their core with others.
struct WorkSplit {
  std::int64_t n_chunk = 0, n_chunks = 0, m_block = 0, m_blocks = 0;
};

inline WorkSplit split_work(std::int64_t m, std::int64_t n, std::int64_t max_chunk, int threads) {
  const auto cdiv = [](std::int64_t a, std::int64_t b) { return (a + b - 1) / b; };
  const std::int64_t want = 8 * static_cast<std::int64_t>(threads);
  WorkSplit s;
  s.n_chunk =
      std::clamp<std::int64_t>(cdiv(cdiv(n, want), 8) * 8, 8, std::max<std::int64_t>(8, max_chunk));
  s.n_chunks = cdiv(n, s.n_chunk);
  const std::int64_t mt = m_tile(m);
  s.m_block = m;
  if (s.n_chunks < want && m > mt) {
    const std::int64_t splits = std::min(cdiv(want, s.n_chunks), cdiv(m, mt));
    s.m_block = cdiv(cdiv(m, splits), mt) * mt;
  }
  s.m_blocks = cdiv(m, s.m_block);
  return s;
}

// Dense: y[i * ldy + j] = x_i · W_j (+ bias[j]) for i < mr, j < nrows. x fp32 rows of stride
// ldx >= round_up(k, 8), zero-padded past k; W rows of w_dtype (F32/BF16/F16), stride k.
struct DotArgs {
  const float* x = nullptr;
  std::int64_t ldx = 0;
  const void* w = nullptr;
  DType w_dtype = DType::kF32;
  const float* bias = nullptr;  // [nrows] or nullptr
  float* y = nullptr;
  std::int64_t ldy = 0;
  std::int64_t mr = 0, nrows = 0, k = 0;
};

// How a quantized row's elements become q values (and in which lane order, see qmatmul.cpp).
enum class QDecode : std::uint8_t {
  kF32 = 0,   // rows already decoded to fp32 q values in lane order (w_stride in bytes)
  kNib4 = 1,  // affine 4-bit: integer codes, lanes [even | odd] per 16 elements
  kByte = 2,  // affine 8-bit: integer codes, natural order
  kFp4 = 3,   // mxfp4 / nvfp4: E2M1 values, lanes [even | odd] per 16 elements
  kFp8 = 4,   // mxfp8: E4M3 values (0x7F / 0xFF as 0), natural order
  kBits = 5,  // affine 1/2/3/5/6-bit: integer codes, lanes [0, 4, 1, 5, 2, 6, 3, 7] per 8
};

// Quantized: y[i * ldy + j] for i < mr, j < nrows (see the chain above). x holds the mr rows in
// the decoder's lane order (stride ldx); scales and, for affine, biases [nrows][groups] fp32;
// xsum [mr][groups8] fp32 with groups8 = round_up(groups, 8), zero-padded (the bias chain's last
// vector takes zero lanes past the last group).
struct QDotArgs {
  QDecode decode = QDecode::kF32;
  int bits = 0;  // kBits: the code width
  const std::uint8_t* w = nullptr;
  std::int64_t w_stride = 0;  // bytes from one W row to the next
  const float* scales = nullptr;
  const float* biases = nullptr;  // affine only, else nullptr
  std::int64_t groups = 0, groups8 = 0;
  int group_size = 0;
  const float* x = nullptr;
  std::int64_t ldx = 0;
  const float* xsum = nullptr;  // with biases
  const float* bias = nullptr;  // layer bias [nrows] or nullptr
  float* y = nullptr;
  std::int64_t ldy = 0;
  std::int64_t mr = 0, nrows = 0, k = 0;
};

}  // namespace mlxcel::cpu
