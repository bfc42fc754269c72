// Softmax and attention conformance: optimized (scalar-threaded, AVX2) against the references,
// all dtypes, odd sizes, masks, strided views; plus properties of the references themselves.
// Bounds: softmax outputs within (2 u(dtype) + (2 sqrt(cols) + 32) 2^-24) |want| + 1e-9 (f16: + 2^-24, its subnormal step);
// attention outputs within 2 u(dtype) |want| + 2e-5 * max|v| (f32 online softmax vs double).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/cpu/attention.h"
#include "backend/cpu/softmax.h"
#include "op_test_util.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using namespace mlxcel::test;

namespace {

class SoftmaxTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(SoftmaxTest, MatchesReference) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(5);
  struct C { std::int64_t rows, cols, pad; bool mask; };
  const C cases[] = {{1, 1, 0, false}, {3, 31, 2, false}, {2, 32, 0, true}, {5, 33, 1, true},
                     {4, 1000, 0, true}, {1, 32768, 0, false}, {17, 7, 3, true}};
  for (DType t : float_types()) {
    for (const C& c : cases) {
      SCOPED_TRACE(case_name(GetParam(), t) + " " + std::to_string(c.rows) + "x" + std::to_string(c.cols));
      const std::int64_t xs = c.cols + c.pad;
      Buf x = random_buf(t, c.rows * xs, rng, 4.0f);
      std::vector<float> mask(static_cast<std::size_t>(c.rows * c.cols));
      for (std::size_t i = 0; i < mask.size(); ++i)
        mask[i] = (i % 5 == 3) ? -std::numeric_limits<float>::infinity() : float(i % 3) - 1.0f;
      Buf want = make_buf(t, c.rows * c.cols), got = make_buf(t, c.rows * c.cols);
      SoftmaxArgs a;
      a.x = x.data(); a.dtype = t; a.rows = c.rows; a.cols = c.cols; a.x_row_stride = xs;
      if (c.mask) { a.mask = mask.data(); a.mask_row_stride = c.cols; }
      a.y = want.data();
      softmax_ref(a);
      poison(got);
      a.y = got.data();
      softmax(a, GetParam());
      // f32: the row sum's rounding grows like sqrt(cols); exp(x - max) of |x| ~ 16 adds ~16 ulp.
      const double rel = 2 * unit_roundoff(t) + (2 * std::sqrt(double(c.cols)) + 32) * std::ldexp(1.0, -24);
      // f16 outputs of long rows are subnormal: allow one subnormal step there.
      EXPECT_LE(worst_ratio(got, want, rel, t == DType::kF16 ? std::ldexp(1.0, -24) : 1e-9), 1.0);
      // Rows sum to 1.
      for (std::int64_t r = 0; r < c.rows; ++r) {
        double s = 0;
        for (std::int64_t j = 0; j < c.cols; ++j) s += got.get(r * c.cols + j);
        if (c.mask && c.cols == 1 && mask[r] < -1e30f) continue;
        EXPECT_NEAR(s, 1.0, 2 * c.cols * unit_roundoff(t) + 1e-5);
      }
    }
  }
}

TEST(SoftmaxRef, KnownValuesAndMaskedColumns) {
  const float x[] = {0.0f, std::log(3.0f), 100.0f};
  const float mask[] = {0.0f, 0.0f, -std::numeric_limits<float>::infinity()};
  float y[3];
  SoftmaxArgs a;
  a.x = x; a.y = y; a.rows = 1; a.cols = 3; a.mask = mask;
  softmax_ref(a);
  EXPECT_NEAR(y[0], 0.25f, 1e-7);
  EXPECT_NEAR(y[1], 0.75f, 1e-7);
  EXPECT_EQ(y[2], 0.0f);
}

struct AttnCase {
  std::int64_t n_heads, n_kv_heads, head_dim, q_len, kv_len, q_offset, window, capacity;
  bool causal;
};

void run_attention(CpuIsa isa, DType t, const AttnCase& c, std::mt19937& rng) {
  SCOPED_TRACE(case_name(isa, t) + " h=" + std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
               " d=" + std::to_string(c.head_dim) + " L=" + std::to_string(c.q_len) + " kv=" +
               std::to_string(c.kv_len) + " off=" + std::to_string(c.q_offset) + " win=" +
               std::to_string(c.window));
  // q as [L, n_heads, D] (row stride n_heads * D), K/V as a cache [n_kv_heads, capacity, D].
  Buf q = random_buf(t, c.q_len * c.n_heads * c.head_dim, rng);
  Buf k = random_buf(t, c.n_kv_heads * c.capacity * c.head_dim, rng);
  Buf v = random_buf(t, c.n_kv_heads * c.capacity * c.head_dim, rng);
  Buf want = make_buf(t, c.q_len * c.n_heads * c.head_dim), got = want;
  AttentionArgs a;
  a.q = q.data(); a.k = k.data(); a.v = v.data(); a.dtype = t;
  a.n_heads = c.n_heads; a.n_kv_heads = c.n_kv_heads; a.head_dim = c.head_dim;
  a.q_len = c.q_len; a.kv_len = c.kv_len; a.q_offset = c.q_offset; a.window = c.window;
  a.causal = c.causal; a.scale = 1.0f / std::sqrt(float(c.head_dim));
  a.q_head_stride = c.head_dim; a.q_row_stride = c.n_heads * c.head_dim;
  a.k_head_stride = c.capacity * c.head_dim; a.k_row_stride = c.head_dim;
  a.v_head_stride = c.capacity * c.head_dim; a.v_row_stride = c.head_dim;
  a.o_head_stride = c.head_dim; a.o_row_stride = c.n_heads * c.head_dim;
  a.out = want.data();
  attention_ref(a);
  // One thread takes the grouped-GQA path almost always, sixteen the per-head path.
  static ThreadPool one(1), many(16);
  for (ThreadPool* pool : {&one, &many}) {
    poison(got);
    a.out = got.data();
    attention(a, isa, pool);
    EXPECT_LE(worst_ratio(got, want, 2 * unit_roundoff(t), 2e-5 * 4), 1.0) << "threads " << pool->size();
  }
}

class AttentionTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(AttentionTest, MatchesReference) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(11);
  const AttnCase cases[] = {
      // heads, kv, D, L, kv_len, offset, window, capacity, causal
      {1, 1, 1, 1, 1, 0, 0, 1, true},
      {4, 4, 32, 31, 31, 0, 0, 40, true},          // prefill, MHA
      {8, 2, 64, 33, 33, 0, 0, 33, true},          // prefill, GQA 4
      {8, 2, 64, 1, 200, 199, 0, 256, true},       // decode after 199 tokens
      {6, 3, 33, 5, 37, 32, 0, 64, true},          // chunked prefill with offset, odd D
      {4, 1, 128, 32, 300, 268, 16, 300, true},    // sliding window 16
      {2, 2, 16, 40, 40, 0, 7, 40, true},          // window in prefill
      {2, 1, 16, 3, 50, 0, 0, 50, false},          // non-causal
      {2, 2, 64, 1, 1000, 999, 0, 1024, true},     // long context decode: many blocks
  };
  for (DType t : float_types())
    for (const AttnCase& c : cases) run_attention(GetParam(), t, c, rng);
}

TEST(AttentionRef, UniformKeysAverageValues) {
  // Identical keys: softmax is uniform over the visible keys, the output is the mean of V rows.
  const std::int64_t d = 4, kv = 6;
  std::vector<float> q(d, 0.3f), k(kv * d, 1.0f), v(kv * d), out(d);
  for (std::int64_t j = 0; j < kv; ++j)
    for (std::int64_t c = 0; c < d; ++c) v[j * d + c] = float(j * 10 + c);
  AttentionArgs a;
  a.q = q.data(); a.k = k.data(); a.v = v.data(); a.out = out.data();
  a.n_heads = a.n_kv_heads = 1; a.head_dim = d; a.q_len = 1; a.kv_len = kv; a.q_offset = 4;
  a.window = 3; a.scale = 0.5f;
  attention_ref(a);
  // Position 4 with window 3 sees keys 2, 3, 4.
  for (std::int64_t c = 0; c < d; ++c) EXPECT_NEAR(out[c], 30.0f + c, 1e-5);
  attention(a, CpuIsa::kScalar);
  for (std::int64_t c = 0; c < d; ++c) EXPECT_NEAR(out[c], 30.0f + c, 1e-5);
}

TEST(Attention, RejectsBadGqa) {
  float x = 0;
  AttentionArgs a;
  a.q = a.k = a.v = &x; a.out = &x; a.n_heads = 3; a.n_kv_heads = 2; a.head_dim = 1;
  EXPECT_THROW(attention(a, CpuIsa::kScalar), Error);
}

INSTANTIATE_TEST_SUITE_P(Isa, SoftmaxTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });
INSTANTIATE_TEST_SUITE_P(Isa, AttentionTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
