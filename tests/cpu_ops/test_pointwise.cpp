// Activations, gated MLPs, elementwise ops, optimized RMSNorm, embedding gather, argmax/top-k.
// Optimized kernels against the scalar references (all dtypes, sizes 1, 7, 31, 32, 33, 1000,
// 100003), and the references against double-precision formulas.
// Bounds: activations 2 u(dtype) |want| + 3e-7 (vector exp vs libm); elementwise exact for
// add/mul/scale (one f32 op, one rounding); RMSNorm 2 u(dtype) |want| + 1e-6.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/activations.h"
#include "backend/cpu/elementwise.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/rms_norm.h"
#include "backend/cpu/topk.h"
#include "op_test_util.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using namespace mlxcel::test;

namespace {

const std::int64_t kSizes[] = {1, 7, 31, 32, 33, 1000, 100003};

class PointwiseTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(PointwiseTest, Activations) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(31);
  for (DType t : float_types())
    for (ActKind k : {ActKind::kSilu, ActKind::kGelu, ActKind::kGeluTanh})
      for (std::int64_t n : kSizes) {
        SCOPED_TRACE(case_name(GetParam(), t) + " kind=" + std::to_string(int(k)) + " n=" + std::to_string(n));
        Buf x = random_buf(t, n, rng, 3.0f);
        if (n > 10) { x.set(0, 30.0f); x.set(1, -30.0f); x.set(2, -100.0f); }
        Buf want = make_buf(t, n), got = make_buf(t, n);
        activation_ref(k, x.data(), want.data(), t, n);
        poison(got);
        activation(k, x.data(), got.data(), t, n, GetParam());
        EXPECT_LE(worst_ratio(got, want, 2 * unit_roundoff(t) + 1e-6, 3e-7), 1.0);
        Buf up = random_buf(t, n, rng);
        gated_activation_ref(k, x.data(), up.data(), want.data(), t, n);
        poison(got);
        gated_activation(k, x.data(), up.data(), got.data(), t, n, GetParam());
        EXPECT_LE(worst_ratio(got, want, 2 * unit_roundoff(t) + 1e-6, 3e-7), 1.0);
      }
}

TEST_P(PointwiseTest, Elementwise) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(41);
  for (DType t : float_types())
    for (BinaryKind k : {BinaryKind::kAdd, BinaryKind::kMul, BinaryKind::kScale})
      for (std::int64_t n : kSizes) {
        Buf a = random_buf(t, n, rng), b = random_buf(t, n, rng);
        Buf want = make_buf(t, n), got = make_buf(t, n);
        binary_ref(k, a.data(), b.data(), want.data(), t, n, 0.37f);
        poison(got);
        binary(k, a.data(), b.data(), got.data(), t, n, 0.37f, GetParam());
        EXPECT_EQ(got.bytes, want.bytes) << case_name(GetParam(), t) << " kind " << int(k) << " n " << n;
      }
}

TEST_P(PointwiseTest, Convert) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(45);
  for (DType st : float_types())
    for (DType dt : float_types())
      for (std::int64_t n : kSizes) {
        Buf src = random_buf(st, n, rng, 100.0f);
        if (n > 8) { src.set(0, NAN); src.set(1, 1e30f); src.set(2, -1e-30f); src.set(3, 65519.0f); }
        Buf got = make_buf(dt, n), want = make_buf(dt, n);
        for (std::int64_t i = 0; i < n; ++i) want.set(i, src.get(i));  // the scalar RNE converters
        poison(got);
        convert(src.data(), st, got.data(), dt, n, GetParam());
        EXPECT_EQ(got.bytes, want.bytes) << case_name(GetParam(), st) << " -> " << dtype_name(dt) << " n " << n;
      }
}

TEST_P(PointwiseTest, RmsNormOptimized) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(51);
  struct C { std::int64_t rows, cols, pad; };
  for (DType t : float_types())
    for (C c : {C{1, 1, 0}, C{3, 31, 2}, C{2, 32, 0}, C{5, 33, 1}, C{4, 4096, 3}, C{64, 128, 0}}) {
      SCOPED_TRACE(case_name(GetParam(), t) + " cols=" + std::to_string(c.cols));
      const std::int64_t xs = c.cols + c.pad;
      Buf x = random_buf(t, c.rows * xs, rng), w = random_buf(t, c.cols, rng);
      Buf want = make_buf(t, c.rows * c.cols), got = want;
      rms_norm_ref(x.data(), w.data(), want.data(), c.rows, c.cols, xs, 1e-5f, t);
      poison(got);
      rms_norm(x.data(), w.data(), got.data(), c.rows, c.cols, xs, 1e-5f, t, GetParam());
      EXPECT_LE(worst_ratio(got, want, 2 * unit_roundoff(t) + 2e-6, 1e-6), 1.0);
      // Fused residual form.
      Buf xr = random_buf(t, c.rows * c.cols, rng), res = random_buf(t, c.rows * c.cols, rng);
      Buf ro_want = make_buf(t, c.rows * c.cols), ro_got = ro_want;
      add_rms_norm_ref(xr.data(), res.data(), w.data(), want.data(), ro_want.data(), c.rows, c.cols, 1e-5f, t);
      add_rms_norm(xr.data(), res.data(), w.data(), got.data(), ro_got.data(), c.rows, c.cols, 1e-5f, t, GetParam());
      EXPECT_EQ(ro_got.bytes, ro_want.bytes);
      EXPECT_LE(worst_ratio(got, want, 2 * unit_roundoff(t) + 2e-6, 1e-6), 1.0);
    }
}

TEST(ActivationRef, Formulas) {
  for (double x : {-8.0, -1.5, -0.1, 0.0, 0.3, 2.0, 9.0}) {
    const float xf = float(x);
    EXPECT_NEAR(silu_f32(xf), x / (1 + std::exp(-x)), 1e-6);
    EXPECT_NEAR(gelu_f32(xf), 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-6);
    const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
    EXPECT_NEAR(gelu_tanh_f32(xf), 0.5 * x * (1 + std::tanh(u)), 1e-6);
  }
}

TEST(Embedding, GatherScaleAndBadId) {
  const std::int64_t vocab = 10, dim = 5;
  std::mt19937 rng(61);
  for (DType tt : float_types())
    for (DType yt : float_types()) {
      Buf table = random_buf(tt, vocab * dim, rng);
      const std::int32_t ids[] = {3, 0, 9, 3};
      Buf y = make_buf(yt, 4 * dim);
      embedding_gather(table.data(), tt, vocab, dim, ids, 4, y.data(), yt, 2.0f);
      for (int i = 0; i < 4; ++i)
        for (int c = 0; c < dim; ++c) {
          Buf one = make_buf(yt, 1);
          one.set(0, table.get(ids[i] * dim + c) * 2.0f);
          EXPECT_EQ(y.get(i * dim + c), one.get(0));
        }
      const std::int32_t bad[] = {1, 10};
      try {
        embedding_gather(table.data(), tt, vocab, dim, bad, 2, y.data(), yt);
        FAIL();
      } catch (const Error& e) {
        EXPECT_EQ(e.category(), ErrorCategory::kBadInput);
        EXPECT_NE(std::string(e.what()).find("10"), std::string::npos);
      }
    }
}

TEST(TopK, ArgmaxAndTopK) {
  const float v[] = {0.5f, 3.0f, -1.0f, 3.0f, NAN, 2.0f, 7.0f};
  EXPECT_EQ(argmax(v, DType::kF32, 7), 6);
  EXPECT_EQ(argmax(v, DType::kF32, 4), 1);  // tie -> lower index
  auto top = top_k(v, DType::kF32, 7, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].index, 6);
  EXPECT_EQ(top[1].index, 1);
  EXPECT_EQ(top[2].index, 3);
  EXPECT_EQ(top_k(v, DType::kF32, 7, 100).size(), 6u);  // NaN never selected
  std::mt19937 rng(71);
  Buf big = random_buf(DType::kBF16, 50000, rng);
  auto t5 = top_k(big.data(), DType::kBF16, 50000, 5);
  std::vector<float> all = big.f32();
  std::vector<float> sorted = all;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t5[i].value, sorted[i]);
  EXPECT_EQ(argmax(big.data(), DType::kBF16, 50000), t5[0].index);
}

INSTANTIATE_TEST_SUITE_P(Isa, PointwiseTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
