// RoPE conformance: the optimized kernel against the reference (all dtypes, traditional and
// split halves, partial rotary dims, freqs tables, per-row positions, input scale, strided views,
// in place), the reference against a double-precision rotation, and the frequency tables'
// defining properties. Bound: 2 u(dtype) |want| + 4e-6 * (1 + |p|/256) (cosf/sinf vs double on
// the same f32 angle).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/rope.h"
#include "op_test_util.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using namespace mlxcel::test;

namespace {

class RopeTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(RopeTest, MatchesReference) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(21);
  struct C { std::int64_t heads, len, d, dims, pad, offset; bool trad, freqs, positions; float in_scale; };
  const C cases[] = {{1, 1, 2, 2, 0, 0, false, false, false, 1.0f},
                     {4, 31, 64, 64, 0, 5, false, false, false, 1.0f},
                     {3, 32, 64, 64, 8, 100, true, false, false, 1.0f},
                     {2, 33, 96, 32, 0, 0, false, true, false, 1.19f},   // partial rotary + freqs
                     {2, 7, 80, 80, 3, 0, true, true, true, 1.0f},
                     {8, 1, 128, 128, 0, 4095, false, true, false, 1.0f}};
  for (DType t : float_types()) {
    for (const C& c : cases) {
      SCOPED_TRACE(case_name(GetParam(), t) + " d=" + std::to_string(c.d) + " dims=" + std::to_string(c.dims) +
                   (c.trad ? " traditional" : "") + (c.freqs ? " freqs" : ""));
      const std::int64_t rs = c.d + c.pad;
      Buf x = random_buf(t, c.heads * c.len * rs, rng);
      std::vector<float> freqs = rope_freqs_llama3(c.dims, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
      std::vector<std::int32_t> pos(static_cast<std::size_t>(c.len));
      for (std::int64_t i = 0; i < c.len; ++i) pos[i] = static_cast<std::int32_t>(3 * i + 1);
      RopeArgs a;
      a.x = x.data(); a.dtype = t; a.n_heads = c.heads; a.seq_len = c.len; a.head_dim = c.d;
      a.x_row_stride = rs; a.y_row_stride = rs; a.dims = c.dims; a.traditional = c.trad;
      a.base = 10000.0f; a.offset = c.offset; a.scale = c.trad ? 0.5f : 1.0f;
      a.freqs = c.freqs ? freqs.data() : nullptr;
      a.positions = c.positions ? pos.data() : nullptr;
      a.input_scale = c.in_scale;
      Buf want = x, got = x;  // pads carry the input bytes in both
      a.y = want.data();
      rope_ref(a);
      a.y = got.data();
      rope(a, GetParam());
      const double abs = 4e-6 * (1.0 + double(c.offset + 3 * c.len) / 256.0);
      EXPECT_LE(worst_ratio(got, want, 2 * unit_roundoff(t), abs), 1.0);
      // In place gives the same bytes as out of place.
      Buf inplace = x;
      a.x = inplace.data();
      a.y = inplace.data();
      rope(a, GetParam());
      EXPECT_EQ(inplace.bytes, got.bytes);
    }
  }
}

TEST(RopeRef, MatchesDoubleRotation) {
  const std::int64_t d = 8, dims = 6, len = 3;
  std::vector<float> x(len * d);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * float(i) - 1.0f;
  for (bool trad : {false, true}) {
    std::vector<float> y(x.size());
    RopeArgs a;
    a.x = x.data(); a.y = y.data(); a.n_heads = 1; a.seq_len = len; a.head_dim = d; a.dims = dims;
    a.traditional = trad; a.base = 100.0f; a.offset = 2; a.scale = 1.0f;
    rope_ref(a);
    for (std::int64_t r = 0; r < len; ++r) {
      for (std::int64_t i = 0; i < dims / 2; ++i) {
        const double theta = double(r + 2) * std::pow(100.0, -2.0 * i / dims);
        const std::int64_t i1 = trad ? 2 * i : i, i2 = trad ? 2 * i + 1 : i + dims / 2;
        const double a1 = x[r * d + i1], a2 = x[r * d + i2];
        EXPECT_NEAR(y[r * d + i1], a1 * std::cos(theta) - a2 * std::sin(theta), 2e-6);
        EXPECT_NEAR(y[r * d + i2], a1 * std::sin(theta) + a2 * std::cos(theta), 2e-6);
      }
      for (std::int64_t i = dims; i < d; ++i) EXPECT_EQ(y[r * d + i], x[r * d + i]);
    }
  }
}

TEST(RopeFreqs, DefiningProperties) {
  auto def = rope_freqs_default(128, 500000.0f);
  ASSERT_EQ(def.size(), 64u);
  EXPECT_FLOAT_EQ(def[0], 1.0f);
  EXPECT_NEAR(def[32] / std::pow(500000.0, 0.5), 1.0, 1e-6);
  // Llama 3: high-frequency (short wavelength) entries unchanged, low-frequency ones x factor.
  auto l3 = rope_freqs_llama3(128, 500000.0f, 8.0f, 1.0f, 4.0f, 8192.0f);
  EXPECT_FLOAT_EQ(l3[0], def[0]);
  EXPECT_FLOAT_EQ(l3[63], def[63] * 8.0f);
  for (std::size_t i = 0; i < l3.size(); ++i) {
    EXPECT_GE(l3[i], def[i] * 0.999999f);
    EXPECT_LE(l3[i], def[i] * 8.000001f);
  }
  // su: elementwise long_factor.
  std::vector<float> lf(32);
  for (std::size_t i = 0; i < lf.size(); ++i) lf[i] = 1.0f + 0.1f * float(i);
  auto su = rope_freqs_su(64, 10000.0f, lf);
  auto d64 = rope_freqs_default(64, 10000.0f);
  for (std::size_t i = 0; i < su.size(); ++i) EXPECT_FLOAT_EQ(su[i], lf[i] * d64[i]);
  EXPECT_THROW(rope_freqs_su(64, 10000.0f, std::vector<float>(5, 1.0f)), Error);
  EXPECT_NEAR(rope_su_mscale(131072, 4096), std::sqrt(1 + std::log(32.0) / std::log(4096.0)), 1e-6);
  EXPECT_EQ(rope_su_mscale(4096, 4096), 1.0f);
  // YaRN: the fastest frequencies extrapolate (unchanged), the slowest interpolate (x factor).
  auto y = rope_freqs_yarn(64, 10000.0f, 4.0f, 4096.0f);
  EXPECT_FLOAT_EQ(y[0], d64[0]);
  EXPECT_NEAR(y[31] / (d64[31] * 4.0f), 1.0, 1e-6);
  EXPECT_NEAR(rope_yarn_mscale(4.0f, 1.0f, 0.0f), 0.1 * std::log(4.0) + 1.0, 1e-6);
}

TEST(RopeFreqs, PlanFromConfig) {
  RopeScaling s;
  s.type = "linear";
  s.factor = 4.0f;
  auto p = make_rope_plan(64, 10000.0f, false, &s, 4096);
  EXPECT_FLOAT_EQ(p.scale, 0.25f);
  EXPECT_TRUE(p.freqs.empty());
  s.type = "longrope";
  s.long_factor.assign(32, 2.0f);
  s.original_max_position_embeddings = 4096;
  p = make_rope_plan(64, 10000.0f, true, &s, 131072);
  EXPECT_FALSE(p.traditional);
  EXPECT_EQ(p.freqs.size(), 32u);
  EXPECT_GT(p.input_scale, 1.0f);
  s.type = "mystery";
  try {
    make_rope_plan(64, 10000.0f, false, &s, 4096);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("mystery"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, RopeTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
