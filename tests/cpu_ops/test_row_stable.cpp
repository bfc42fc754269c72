// Row stability of the fast-numerics linear kernels (matmul, qmatmul): y[m][n] must be bit for bit
// the same whatever M is, whichever row m it is and however many threads run the call, because
// the server batches requests and greedy outputs must not change with batch composition. Each
// case computes every row alone (one thread) and compares, bitwise, calls with M = 1..17, random
// subsets of the rows in random order, strided rows, and pools of 1, 2 and 3 threads; both ISAs.
// Accuracy against the double-accumulating references (matmul_ref; quant::decode_row_f32) is
// checked on the same data with the fp32 dot-product bound of test_matmul.cpp:
//   |got - want| <= 8 * sqrt(K + 1) * 2^-24 * (Σ_k |x_k| * mag_k + 1)
// with mag_k = |w_k| for dense weights and |w_k| + 2 |bias_g| for affine ones (the fused kernel
// sums scale·q and bias separately, so their sizes, not their difference, set the rounding).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/matmul.h"
#include "backend/cpu/qmatmul.h"
#include "op_test_util.h"
#include "quant/qmm.h"
#include "quant/quantize.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using namespace mlxcel::test;

namespace {

constexpr std::int64_t kRows = 17;

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// The row lists each case runs: 0..M-1 for every M, then random subsets in random order.
std::vector<std::vector<std::int64_t>> row_lists(std::mt19937& rng) {
  std::vector<std::vector<std::int64_t>> lists;
  for (std::int64_t m = 1; m <= kRows; ++m) {
    lists.emplace_back(static_cast<std::size_t>(m));
    std::iota(lists.back().begin(), lists.back().end(), 0);
  }
  for (int t = 0; t < 6; ++t) {
    std::vector<std::int64_t> all(kRows);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(static_cast<std::size_t>(1 + rng() % kRows));
    lists.push_back(all);
  }
  return lists;
}

ThreadPool& pool_of(int threads) {
  static ThreadPool p1(1), p2(2), p3(3);
  return threads == 1 ? p1 : threads == 2 ? p2 : p3;
}

// ---- dense ----

struct Dense {
  DType xt, wt;
  std::int64_t n, k;
  bool bias;
};

// y (f32, row stride n) for the listed rows of x, gathered with row stride xs.
std::vector<float> dense_rows(const Dense& c, const Buf& x, const Buf& w, const Buf& b,
                              const std::vector<std::int64_t>& rows, std::int64_t xs, CpuIsa isa,
                              int threads) {
  const std::int64_t m = static_cast<std::int64_t>(rows.size());
  Buf xg = make_buf(c.xt, m * xs);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t e = 0; e < c.k; ++e) xg.set(i * xs + e, x.get(rows[i] * c.k + e));
  std::vector<float> y(static_cast<std::size_t>(m * c.n), NAN);
  MatmulArgs a;
  a.x = xg.data();
  a.x_dtype = c.xt;
  a.x_row_stride = xs;
  a.w = w.data();
  a.w_dtype = c.wt;
  a.bias = c.bias ? b.data() : nullptr;
  a.y = y.data();
  a.y_dtype = DType::kF32;
  a.m = m;
  a.n = c.n;
  a.k = c.k;
  matmul(a, isa, &pool_of(threads));
  return y;
}

void check_dense(CpuIsa isa, const Dense& c, std::mt19937& rng) {
  SCOPED_TRACE(case_name(isa, c.xt) + " w=" + std::string(dtype_name(c.wt)) +
               " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k));
  Buf x = random_buf(c.xt, kRows * c.k, rng), w = random_buf(c.wt, c.n * c.k, rng, 0.5f);
  Buf b = random_buf(c.wt, c.n, rng);
  std::vector<std::vector<float>> alone;
  for (std::int64_t r = 0; r < kRows; ++r)
    alone.push_back(dense_rows(c, x, w, b, {r}, c.k, isa, 1));

  // Accuracy of the single-row results against the double-accumulating reference.
  Buf want = make_buf(DType::kF32, kRows * c.n);
  MatmulArgs ra;
  ra.x = x.data();
  ra.x_dtype = c.xt;
  ra.w = w.data();
  ra.w_dtype = c.wt;
  ra.bias = c.bias ? b.data() : nullptr;
  ra.y = want.data();
  ra.m = kRows;
  ra.n = c.n;
  ra.k = c.k;
  matmul_ref(ra);
  double worst = 0;
  for (std::int64_t r = 0; r < kRows; ++r)
    for (std::int64_t j = 0; j < c.n; ++j) {
      double mag = 0;
      for (std::int64_t e = 0; e < c.k; ++e)
        mag += std::fabs(double(x.get(r * c.k + e)) * w.get(j * c.k + e));
      const double bound = 8 * std::sqrt(double(c.k) + 1) * std::ldexp(1.0, -24) * (mag + 1);
      worst = std::max(worst, std::fabs(alone[r][j] - want.get(r * c.n + j)) / bound);
    }
  EXPECT_LE(worst, 1.0);

  int call = 0;
  for (const auto& rows : row_lists(rng)) {
    const int threads = 1 + call % 3;
    const std::int64_t xs = c.k + (call % 4 == 3 ? 5 : 0);
    ++call;
    const std::vector<float> y = dense_rows(c, x, w, b, rows, xs, isa, threads);
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::int64_t j = 0; j < c.n; ++j)
        ASSERT_TRUE(same_bits(y[i * c.n + j], alone[rows[i]][j]))
            << "M=" << rows.size() << " position " << i << " row " << rows[i] << " col " << j
            << " threads " << threads << ": " << y[i * c.n + j] << " vs " << alone[rows[i]][j];
  }
}

class RowStableTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(RowStableTest, DenseMatmul) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(31);
  // n = 37 leaves a partial register tile; k = 1100 and 4100 cross the k-blocks of 3-row and 1-row
  // calls; odd k ends in a zero-padded chunk.
  const Dense cases[] = {
      {DType::kF32, DType::kF32, 37, 64, true},    {DType::kF32, DType::kBF16, 37, 1100, false},
      {DType::kBF16, DType::kF16, 70, 33, true},   {DType::kF16, DType::kBF16, 9, 7, false},
      {DType::kF32, DType::kBF16, 20, 4100, true}, {DType::kBF16, DType::kBF16, 130, 300, false}};
  for (const Dense& c : cases) check_dense(GetParam(), c, rng);
}

// ---- quantized ----

struct Quant {
  QuantParams p;
  std::int64_t n, k;
  DType wt;  // dtype of the float matrix quantized (affine scales and biases take it)
};

struct QFixture {
  QuantizedTensor q;
  QWeight qw;
};

QFixture make_quant(const Quant& c, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 0.05f);
  std::vector<float> w(static_cast<std::size_t>(c.n * c.k));
  for (auto& v : w) v = nd(rng) + 0.02f;  // off-centre groups give biases of either sign
  QFixture f;
  f.q = quantize(Tensor::from_f32(w, {c.n, c.k}, c.wt), c.p);
  f.qw.w = static_cast<const std::uint32_t*>(f.q.weight.raw());
  f.qw.scales = f.q.scales.raw();
  f.qw.scales_dtype = f.q.scales.dtype();
  f.qw.biases = f.q.biases.defined() ? f.q.biases.raw() : nullptr;
  f.qw.mode = static_cast<QMode>(c.p.mode);
  f.qw.bits = c.p.bits;
  f.qw.group_size = c.p.group_size;
  f.qw.n = c.n;
  f.qw.k = c.k;
  return f;
}

enum class QPath { kFused, kPredecoded };

std::vector<float> quant_rows(const QFixture& f, const std::vector<float>& x,
                              const std::vector<float>& bias, const std::vector<std::int64_t>& rows,
                              CpuIsa isa, int threads, QPath path = QPath::kFused) {
  const std::int64_t m = static_cast<std::int64_t>(rows.size()), k = f.qw.k, n = f.qw.n;
  std::vector<float> xg(static_cast<std::size_t>(m * k));
  for (std::int64_t i = 0; i < m; ++i) std::copy_n(&x[rows[i] * k], k, &xg[i * k]);
  std::vector<float> y(static_cast<std::size_t>(m * n), NAN);
  const float* b = bias.empty() ? nullptr : bias.data();
  if (path == QPath::kFused)
    qmatmul(f.qw, xg.data(), m, b, y.data(), isa, &pool_of(threads));
  else
    qmatmul_predecoded(f.qw, xg.data(), m, b, y.data(), isa, &pool_of(threads));
  return y;
}

void check_quant(CpuIsa isa, const Quant& c, std::mt19937& rng) {
  SCOPED_TRACE(std::string(isa_name(isa)) + " " + c.p.str() + " n=" + std::to_string(c.n) +
               " k=" + std::to_string(c.k) + " " + std::string(dtype_name(c.wt)));
  const QFixture f = make_quant(c, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(kRows * c.k)), bias;
  for (auto& v : x) v = nd(rng);
  if (c.n % 2) {
    bias.resize(static_cast<std::size_t>(c.n));
    for (auto& v : bias) v = nd(rng);
  }
  std::vector<std::vector<float>> alone;
  for (std::int64_t r = 0; r < kRows; ++r) alone.push_back(quant_rows(f, x, bias, {r}, isa, 1));

  // Accuracy against the fp32 decode of the reference, accumulated in double.
  const std::int64_t groups = c.k / c.p.group_size;
  std::vector<float> wd(static_cast<std::size_t>(c.k));
  double worst = 0;
  for (std::int64_t j = 0; j < c.n; ++j) {
    quant::decode_row_f32(f.q.weight, f.q.scales, f.q.biases.defined() ? &f.q.biases : nullptr, c.p,
                          j, wd.data());
    for (std::int64_t r = 0; r < kRows; ++r) {
      double want = bias.empty() ? 0.0 : bias[j], mag = 0;
      for (std::int64_t e = 0; e < c.k; ++e) {
        const double b = f.q.biases.defined()
                             ? quant::load_float(f.q.biases.raw(), f.q.biases.dtype(),
                                                 j * groups + e / c.p.group_size)
                             : 0.0;
        want += double(x[r * c.k + e]) * wd[e];
        mag += std::fabs(double(x[r * c.k + e])) * (std::fabs(double(wd[e])) + 2 * std::fabs(b));
      }
      const double bound = 8 * std::sqrt(double(c.k) + 1) * std::ldexp(1.0, -24) * (mag + 1);
      ASSERT_FALSE(std::isnan(alone[r][j]));
      worst = std::max(worst, std::fabs(alone[r][j] - want) / bound);
    }
  }
  EXPECT_LE(worst, 1.0);

  int call = 0;
  for (const auto& rows : row_lists(rng)) {
    const int threads = 1 + call++ % 3;
    const std::vector<float> y = quant_rows(f, x, bias, rows, isa, threads);
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (std::int64_t j = 0; j < c.n; ++j)
        ASSERT_TRUE(same_bits(y[i * c.n + j], alone[rows[i]][j]))
            << "M=" << rows.size() << " position " << i << " row " << rows[i] << " col " << j
            << " threads " << threads << ": " << y[i * c.n + j] << " vs " << alone[rows[i]][j];
  }

  // The fused decoders give the q values of the predecoded path in the same lane order.
  std::vector<std::int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  const std::vector<float> fused = quant_rows(f, x, bias, all, isa, 2, QPath::kFused);
  const std::vector<float> pre = quant_rows(f, x, bias, all, isa, 2, QPath::kPredecoded);
  for (std::size_t i = 0; i < fused.size(); ++i)
    ASSERT_TRUE(same_bits(fused[i], pre[i]))
        << "element " << i << ": " << fused[i] << " vs " << pre[i];
}

TEST_P(RowStableTest, QuantizedMatmulEveryMode) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(57);
  std::vector<Quant> cases;
  for (int bits : {1, 2, 3, 4, 5, 6, 8})
    for (int gs : {32, 64, 128})
      cases.push_back({{QuantMode::kAffine, bits, gs}, 21, 384, DType::kBF16});
  cases.push_back({{QuantMode::kAffine, 4, 64}, 19, 256, DType::kF32});
  cases.push_back({{QuantMode::kAffine, 8, 32}, 19, 256, DType::kF16});
  for (QuantMode m : {QuantMode::kMxfp4, QuantMode::kMxfp8, QuantMode::kNvfp4})
    cases.push_back({default_params(m), 21, 384, DType::kBF16});
  for (const Quant& c : cases) check_quant(GetParam(), c, rng);
}

TEST_P(RowStableTest, QuantizedMatmulAcrossKBlocks) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(58);
  // 4352 columns cross the k-block of 1-row calls (4096) and of 3-row calls (1344 at gs 64).
  check_quant(GetParam(), {{QuantMode::kAffine, 4, 64}, 20, 4352, DType::kBF16}, rng);
  check_quant(GetParam(), {{QuantMode::kAffine, 8, 128}, 9, 4352, DType::kBF16}, rng);
  check_quant(GetParam(), {default_params(QuantMode::kMxfp4), 9, 4352, DType::kBF16}, rng);
  check_quant(GetParam(), {{QuantMode::kAffine, 3, 64}, 9, 4352, DType::kBF16}, rng);
}

TEST_P(RowStableTest, QuantizedUnfusedTwinAgrees) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(59);
  const Quant c{{QuantMode::kAffine, 4, 64}, 33, 512, DType::kBF16};
  const QFixture f = make_quant(c, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(5 * c.k)), a(5 * c.n), b(5 * c.n);
  for (auto& v : x) v = nd(rng);
  qmatmul(f.qw, x.data(), 5, nullptr, a.data(), GetParam());
  qmatmul_unfused(f.qw, x.data(), 5, nullptr, b.data(), GetParam());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-4 * (1 + std::fabs(b[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(Isa, RowStableTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
