// Matmul conformance: optimized (scalar-threaded and AVX2) against the double-accumulating
// reference, every x/W dtype pair, GEMV and GEMM shapes incl. 1, 31, 32, 33, odd K, strided
// rows, bias. Bound per output: 2 * u(y) * |want| + 8 * sqrt(K) * 2^-24 * sum_k |x_k w_k|
// (one rounding to y's dtype either side, f32 accumulation in the optimized kernel).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/matmul.h"
#include "op_test_util.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using namespace mlxcel::test;

namespace {

struct Shape3 {
  std::int64_t m, n, k;
};

void run_case(CpuIsa isa, DType xt, DType wt, Shape3 s, bool bias, std::int64_t xpad,
              std::int64_t ypad, std::mt19937& rng) {
  SCOPED_TRACE(case_name(isa, xt) + " w=" + std::string(dtype_name(wt)) + " m=" +
               std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
               (bias ? " bias" : "") + " xpad=" + std::to_string(xpad));
  const std::int64_t xs = s.k + xpad, ys = s.n + ypad;
  Buf x = random_buf(xt, s.m * xs, rng);
  Buf w = random_buf(wt, s.n * s.k, rng, 0.5f);
  Buf b = random_buf(wt, s.n, rng);
  Buf want = make_buf(xt, s.m * ys), got = make_buf(xt, s.m * ys);
  MatmulArgs a;
  a.x = x.data();
  a.x_dtype = xt;
  a.x_row_stride = xs;
  a.w = w.data();
  a.w_dtype = wt;
  a.bias = bias ? b.data() : nullptr;
  a.y_dtype = xt;
  a.y_row_stride = ys;
  a.m = s.m;
  a.n = s.n;
  a.k = s.k;
  a.y = want.data();
  matmul_ref(a);
  poison(got);
  a.y = got.data();
  matmul(a, isa);
  double worst = 0;
  for (std::int64_t i = 0; i < s.m; ++i) {
    for (std::int64_t j = 0; j < s.n; ++j) {
      double absdot = 0;
      for (std::int64_t c = 0; c < s.k; ++c) absdot += std::fabs(double(x.get(i * xs + c)) * w.get(j * s.k + c));
      const double g = got.get(i * ys + j), e = want.get(i * ys + j);
      const double bound = 2 * unit_roundoff(xt) * std::fabs(e) +
                           8 * std::sqrt(double(s.k) + 1) * std::ldexp(1.0, -24) * (absdot + 1) + 1e-30;
      ASSERT_FALSE(std::isnan(g)) << i << "," << j;
      worst = std::max(worst, std::fabs(g - e) / bound);
    }
  }
  EXPECT_LE(worst, 1.0);
}

class MatmulTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(MatmulTest, AllDtypesAndShapes) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(1234);
  const Shape3 shapes[] = {{1, 1, 1},   {1, 31, 33},  {1, 32, 32},  {1, 33, 31},  {2, 17, 40},
                           {3, 16, 9},  {4, 65, 257}, {5, 15, 8},   {6, 16, 16},  {7, 33, 31},
                           {31, 64, 32}, {32, 17, 33}, {33, 130, 300}, {13, 70, 0}};
  for (DType xt : float_types())
    for (DType wt : float_types())
      for (const Shape3& s : shapes) run_case(GetParam(), xt, wt, s, (s.m + s.n) % 2 == 0, 0, 0, rng);
}

TEST_P(MatmulTest, StridedRowsAndBias) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(99);
  for (DType t : float_types()) {
    run_case(GetParam(), t, t, {1, 40, 64}, true, 7, 3, rng);
    run_case(GetParam(), t, t, {9, 40, 64}, true, 5, 1, rng);
  }
}

TEST_P(MatmulTest, LargeShapes) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(7);
  run_case(GetParam(), DType::kBF16, DType::kBF16, {1, 1024, 2048}, false, 0, 0, rng);
  run_case(GetParam(), DType::kF32, DType::kBF16, {96, 200, 520}, true, 0, 0, rng);
  run_case(GetParam(), DType::kF16, DType::kF16, {300, 48, 256}, false, 0, 0, rng);
}

TEST(MatmulRef, MatchesHandComputed) {
  // [[1, 2, 3]] · [[1, 0, 1], [0.5, 0.5, 0.5]]^T + [10, 20] = [14, 23]
  const float x[] = {1, 2, 3}, w[] = {1, 0, 1, 0.5f, 0.5f, 0.5f}, b[] = {10, 20};
  float y[2] = {0, 0};
  MatmulArgs a;
  a.x = x; a.w = w; a.bias = b; a.y = y; a.m = 1; a.n = 2; a.k = 3;
  matmul_ref(a);
  EXPECT_FLOAT_EQ(y[0], 14.0f);
  EXPECT_FLOAT_EQ(y[1], 23.0f);
  float y2[2] = {0, 0};
  a.y = y2;
  matmul(a, CpuIsa::kScalar);
  EXPECT_FLOAT_EQ(y2[0], 14.0f);
  EXPECT_FLOAT_EQ(y2[1], 23.0f);
}

TEST(MatmulTensor, LinearWrapper) {
  std::mt19937 rng(3);
  std::vector<float> xv(2 * 3 * 8), wv(5 * 8);
  std::normal_distribution<float> d;
  for (auto& v : xv) v = d(rng);
  for (auto& v : wv) v = d(rng);
  Tensor x = Tensor::from_f32(xv, {2, 3, 8}, DType::kF32);
  Tensor w = Tensor::from_f32(wv, {5, 8}, DType::kF32);
  Tensor y = linear(x, w);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  auto yv = y.to_f32();
  for (int r = 0; r < 6; ++r)
    for (int n = 0; n < 5; ++n) {
      double s = 0;
      for (int k = 0; k < 8; ++k) s += double(xv[r * 8 + k]) * wv[n * 8 + k];
      EXPECT_NEAR(yv[r * 5 + n], s, 1e-5);
    }
  EXPECT_THROW(linear(x, Tensor::from_f32(wv, {8, 5}, DType::kF32)), Error);
}

INSTANTIATE_TEST_SUITE_P(Isa, MatmulTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
