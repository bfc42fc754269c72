#pragma once
// The sampling op's arithmetic, written once for the CPU and the GPU backends (MLXCEL_HD), so that
// both draw the same token from the same logits, bit for bit.
//
// The rule that makes that possible: every decision (which tokens the filters keep, which token
// the draw picks) is made on values both devices compute identically:
//   - s_i = logit_i - max (one IEEE subtraction) and comparisons on it (min-p, top-k, greedy);
//   - weights w_i = floor(exp(x) * 2^40) as 64-bit integers, with exp computed by exp_neg below
//     from explicit fmaf and exact scalings only (no library exp, whose last bit differs between
//     glibc, CUDA and ROCm), so sums of weights are exact and independent of summation order
//     (top-p's nucleus mass, the categorical draw's prefix sums);
//   - the uniform of the draw is a 64-bit Philox4x32-10 output (core/philox.h) scaled to the
//     integer total with a 64x64->128-bit product.
// Floating-point sums whose order differs between devices (the log-softmax normalizer) only feed
// the reported log-probabilities, never a decision. Files that include this header compile with
// floating-point contraction off (CMake), so no a*b+c in it becomes an fma on one device only.
//
// A token whose weight relative to the most likely one is below 2^-40 (about 9e-13) has
// probability zero here.
#include <cstdint>

#include "core/hd.h"
#include "core/philox.h"

#include <cmath>

namespace mlxcel::backend {

// Per-row sampling parameters (plain data; the runtime uploads an array of them).
struct SampleRow {
  std::int64_t logit_row = 0;        // row of the logits view this row samples from
  float temperature = 0.0f;          // <= 0: greedy (argmax, ties -> lowest id)
  float inv_temperature = 1.0f;      // 1 / temperature, computed once on the host
  float top_p = 1.0f;                // (0, 1]; 1 disables
  float log_min_p = -INFINITY;       // log(min_p); -inf disables
  std::int32_t top_k = 0;            // 0 disables
  std::int32_t min_keep = 1;         // min-p keeps at least this many (by value, then id)
  std::int32_t n_top = 0;            // top log-probabilities to return (<= kSampleMaxTop)
  std::int32_t proc_begin = 0;       // logit processors of this row: procs[begin, end)
  std::int32_t proc_end = 0;
  std::int32_t mask_row = -1;        // allowed-token bitmask row, -1: none
  std::int32_t debug_nan = 0;        // test hook: poison logit 0 with NaN
  // 1: report the chosen token's log-probability; 0: skip the softmax normalizer (a pass over
  // the vocabulary in double) and report logprob 0. The chosen token is the same either way;
  // n_top > 0 computes the normalizer regardless.
  std::int32_t logprobs = 1;
  std::uint64_t seed = 0, stream = 0, position = 0;  // the Philox counter of the draw
};

// One logit processor applied to one token, in array order (mlx-lm's order: logit bias, then
// repetition, presence and frequency penalties; a frequency penalty appears once per occurrence).
enum class SampleProcKind : std::int32_t { kBias = 0, kRepetition = 1, kSubtract = 2 };
struct SampleProc {
  std::int32_t token = 0;
  SampleProcKind kind = SampleProcKind::kBias;
  float value = 0.0f;
};

constexpr int kSampleMaxTop = 20;  // OpenAI's top_logprobs limit

enum class SampleStatus : std::int32_t { kOk = 0, kNonFinite = 1, kAllMasked = 2 };

struct SampleOut {
  std::int32_t token = -1;
  SampleStatus status = SampleStatus::kOk;
  float logprob = 0.0f;  // of `token` after the processors, before the filters
  std::int32_t n_top = 0;
  std::int32_t top_ids[kSampleMaxTop] = {};
  float top_logprobs[kSampleMaxTop] = {};
};

MLXCEL_HDI float apply_sample_proc(float l, SampleProcKind kind, float v) {
  switch (kind) {
    case SampleProcKind::kBias:
      return l + v;
    case SampleProcKind::kRepetition:  // sign-aware (CTRL): pushes the logit towards less likely
      return l < 0.0f ? l * v : l / v;
    case SampleProcKind::kSubtract:
      return l - v;
  }
  return l;
}

// exp(x) for x <= 0, the same bits on every IEEE-754 device: Cody-Waite reduction by ln 2 with a
// two-part constant, a degree-6 Taylor polynomial on |r| <= ln2/2 (relative error < 2e-7) in
// explicit fmaf, and an exact scaling by 2^k. Below -28 it returns 0 (e^-28 < 2^-40: such a weight
// is 0 anyway), which also keeps every result a normal float.
MLXCEL_HDI float exp_neg(float x) {
  if (!(x >= -28.0f)) return 0.0f;  // also -inf and NaN
  const float k = rintf(x * 1.44269504f);
  float r = fmaf(k, -0.693145751953125f, x);  // ln2 high part: 16 significant bits, exact k*hi
  r = fmaf(k, -1.428606765330187e-06f, r);    // ln2 low part
  float p = 1.0f / 720.0f;
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  return ldexpf(p, static_cast<int>(k));
}

// The integer weight of a shifted logit x (<= 0): floor(exp(x) * 2^40); the most likely token
// weighs 2^40, so a 2^18-token vocabulary sums to < 2^58.
MLXCEL_HDI std::uint64_t sample_weight(float x) {
  return static_cast<std::uint64_t>(exp_neg(x) * 0x1p40f);
}

// The high 64 bits of a 64x64-bit product, in 32-bit parts (the same integer code on every
// device; no compiler intrinsic needed).
MLXCEL_HDI std::uint64_t mul_hi64(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t a_lo = a & 0xffffffffu, a_hi = a >> 32, b_lo = b & 0xffffffffu, b_hi = b >> 32;
  const std::uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
  const std::uint64_t mid = (p0 >> 32) + (p1 & 0xffffffffu) + (p2 & 0xffffffffu);
  return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}

// The draw's target in [0, total): floor(r * total / 2^64) for a 64-bit Philox output r.
MLXCEL_HDI std::uint64_t draw_target(std::uint64_t seed, std::uint64_t stream,
                                     std::uint64_t position, std::uint64_t total) {
  return mul_hi64(philox_u64(seed, stream, position), total);
}

// Does the nucleus mass `above` reach top_p of `total`? (Both devices: one double product.)
MLXCEL_HDI bool nucleus_reached(std::uint64_t above, std::uint64_t total, float top_p) {
  return static_cast<double>(above) >= static_cast<double>(top_p) * static_cast<double>(total);
}

// A float's order as an unsigned integer (for searches over values): a < b <=> key(a) < key(b)
// for non-NaN floats, -inf lowest.
MLXCEL_HDI std::uint32_t float_order_key(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, sizeof u);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
MLXCEL_HDI float float_from_order_key(std::uint32_t k) {
  const std::uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace mlxcel::backend
