// Paged decode attention (backend/cpu/paged_attention.h) against a double-precision reference
// written here from the definition: softmax(q·k_j · scale) over the keys a query sees (j <= pos,
// pos - j < window), weighted sum of v_j. F32/BF16/F16 caches, GQA, odd head sizes, windows,
// several blocks; both ISAs. Bound: 2e-5 * max|v| + 4 u(kv dtype) |want| (the cache holds exact
// values of its dtype, so only fp32 arithmetic differs). The mlx-numerics variant rounds every
// step to bf16 and is held to a bf16-sized bound.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/paged_attention.h"
#include "op_test_util.h"

using namespace mlxcel;
using namespace mlxcel::cpu;
using namespace mlxcel::test;

namespace {

struct Paged {
  int block_size, n_kv, hd;
  DType t;
  std::vector<std::vector<std::uint8_t>> kb, vb;
  std::vector<void*> kp, vp;
  PagedKv view;
  Paged(int blocks, int bs, int n_kv_heads, int head_dim, DType dt)
      : block_size(bs), n_kv(n_kv_heads), hd(head_dim), t(dt) {
    const std::size_t bytes = static_cast<std::size_t>(n_kv) * bs * hd * dtype_size(dt);
    for (int b = 0; b < blocks; ++b) {
      kb.emplace_back(bytes);
      vb.emplace_back(bytes);
    }
    for (int b = 0; b < blocks; ++b) {
      kp.push_back(kb[b].data());
      vp.push_back(vb[b].data());
    }
    view.k_blocks = kp.data();
    view.v_blocks = vp.data();
    view.block_size = bs;
    view.n_kv_heads = n_kv;
    view.head_dim = view.v_dim = hd;
    view.dtype = dt;
  }
};

float round_to(DType t, float v) {
  if (t == DType::kBF16) return bf16(v).to_float();
  if (t == DType::kF16) return f16(v).to_float();
  return v;
}

class PagedAttentionTest : public ::testing::TestWithParam<CpuIsa> {};

TEST_P(PagedAttentionTest, MatchesDefinition) {
  MLXCEL_SKIP_IF_NO_ISA(GetParam());
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  struct C { int n_heads, n_kv, hd, bs; std::int64_t pos, window; };
  const C cases[] = {{4, 4, 64, 16, 0, 0},   {8, 2, 64, 16, 40, 0},  {6, 3, 17, 8, 33, 0},
                     {4, 1, 80, 32, 100, 16}, {2, 2, 128, 4, 9, 3},   {16, 8, 8, 16, 63, 64}};
  for (DType t : float_types()) {
    for (const C& c : cases) {
      SCOPED_TRACE(case_name(GetParam(), t) + " heads " + std::to_string(c.n_heads) + "/" +
                   std::to_string(c.n_kv) + " hd " + std::to_string(c.hd) + " pos " + std::to_string(c.pos));
      const int blocks = static_cast<int>(c.pos / c.bs + 1);
      Paged p(blocks, c.bs, c.n_kv, c.hd, t);
      std::vector<float> k((c.pos + 1) * c.n_kv * c.hd), v(k.size()), q(c.n_heads * c.hd);
      for (auto& x : k) x = round_to(t, nd(rng));
      for (auto& x : v) x = round_to(t, nd(rng));
      for (auto& x : q) x = nd(rng);
      for (std::int64_t j = 0; j <= c.pos; ++j)
        paged_kv_write(p.view, j, k.data() + j * c.n_kv * c.hd, v.data() + j * c.n_kv * c.hd);
      const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
      std::vector<float> got(c.n_heads * c.hd, NAN), mlx(got.size(), NAN);
      paged_attention(q.data(), c.n_heads, p.view, c.pos, c.window, scale, got.data(), 0, -1, GetParam());
      const int group = c.n_heads / c.n_kv;
      for (int g = 0; g < c.n_kv; ++g)
        paged_attention_mlx(q.data(), c.n_heads, p.view, c.pos, c.window, scale, DType::kBF16, mlx.data(),
                            g * group, (g + 1) * group);
      const std::int64_t first = c.window > 0 ? std::max<std::int64_t>(0, c.pos - c.window + 1) : 0;
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / group;
        std::vector<double> s;
        double mx = -INFINITY;
        for (std::int64_t j = first; j <= c.pos; ++j) {
          double d = 0;
          for (int i = 0; i < c.hd; ++i) d += double(q[h * c.hd + i]) * k[(j * c.n_kv + g) * c.hd + i];
          s.push_back(d * scale);
          mx = std::max(mx, s.back());
        }
        double z = 0;
        for (auto& x : s) z += (x = std::exp(x - mx));
        for (int i = 0; i < c.hd; ++i) {
          double want = 0, vmax = 0;
          for (std::size_t jj = 0; jj < s.size(); ++jj) {
            const double vv = v[((first + jj) * c.n_kv + g) * c.hd + i];
            want += s[jj] / z * vv;
            vmax = std::max(vmax, std::fabs(vv));
          }
          const double tol = 2e-5 * vmax + 4 * unit_roundoff(t) * std::fabs(want);
          ASSERT_NEAR(got[h * c.hd + i], want, tol) << "head " << h << " dim " << i;
          // bf16 at every step: a few bf16 ulps of the largest value involved.
          ASSERT_NEAR(mlx[h * c.hd + i], want, 0.05 * vmax + 0.02) << "mlx head " << h << " dim " << i;
        }
      }
      // A head subset gives exactly the full call's rows (the server batches by KV head).
      std::vector<float> part(got.size(), NAN);
      paged_attention(q.data(), c.n_heads, p.view, c.pos, c.window, scale, part.data(), group,
                      std::min(c.n_heads, 2 * group), GetParam());
      for (int h = group; h < std::min(c.n_heads, 2 * group); ++h)
        for (int i = 0; i < c.hd; ++i) ASSERT_EQ(part[h * c.hd + i], got[h * c.hd + i]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, PagedAttentionTest, ::testing::ValuesIn(all_isas()),
                         [](const auto& info) { return std::string(isa_name(info.param)); });

}  // namespace
