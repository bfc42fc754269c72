#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "backend/backend.h"
#include "core/error.h"
#include "core/philox.h"
#include "runtime/sampler.h"
#include "runtime/stop_strings.h"

using namespace mlxcel;
using namespace mlxcel::runtime;

namespace {
std::vector<float> random_logits(int n, std::uint32_t seed, float scale = 3.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
}  // namespace

TEST(Sampler, GreedyIsArgmaxWithLogprob) {
  auto l = random_logits(1000, 1);
  std::size_t best = std::max_element(l.begin(), l.end()) - l.begin();
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  Sampler s(SamplingParams{});
  auto copy = l;
  auto r = s.sample(copy, {}, 5);
  EXPECT_EQ(r.token, static_cast<int>(best));
  EXPECT_NEAR(r.logprob, l[best] - std::log(z), 1e-4);
  ASSERT_EQ(r.top.size(), 5u);
  EXPECT_EQ(r.top[0].id, r.token);
  for (int i = 1; i < 5; ++i) EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
}

// A request without logprobs skips the softmax normalizer: the same token for every filter and
// temperature, logprob reported as 0 (with it, the chosen token's true log-probability).
TEST(Sampler, SkippingLogprobsKeepsTheToken) {
  const auto l = random_logits(3000, 7, 2.0f);
  double z = 0;
  const float mx = *std::max_element(l.begin(), l.end());
  for (float x : l) z += std::exp(static_cast<double>(x - mx));
  const double lse = mx + std::log(z);
  for (int kind = 0; kind < 5; ++kind) {
    SamplingParams p;
    p.temperature = kind == 0 ? 0.0f : 1.1f;
    if (kind == 2) p.top_p = 0.8f;
    if (kind == 3) p.top_k = 20;
    if (kind == 4) p.min_p = 0.05f;
    p.seed = 99;
    Sampler smp(p);
    for (int pos = 0; pos < 16; ++pos) {
      std::vector<backend::SampleProc> procs;
      backend::SampleRow r = smp.row({}, pos, 0, procs);
      backend::SampleOut with, without;
      backend::sample_on_host(l.data(), static_cast<std::int64_t>(l.size()), r, procs.data(),
                              nullptr, &with);
      r.logprobs = 0;
      backend::sample_on_host(l.data(), static_cast<std::int64_t>(l.size()), r, procs.data(),
                              nullptr, &without);
      ASSERT_EQ(with.status, backend::SampleStatus::kOk);
      EXPECT_EQ(without.token, with.token) << "kind " << kind << " position " << pos;
      EXPECT_EQ(without.logprob, 0.0f);
      EXPECT_NEAR(with.logprob, l[with.token] - lse, 1e-4) << "kind " << kind;
    }
  }
}

TEST(Sampler, SeedReproducesAndDiffersAcrossSeeds) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 1234;
  auto run = [&](std::uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int> out;
    for (int i = 0; i < 64; ++i) {
      auto l = random_logits(500, 100 + i, 1.0f);
      out.push_back(s.sample(l, {}, 0, i).token);
    }
    return out;
  };
  EXPECT_EQ(run(1234), run(1234));
  EXPECT_NE(run(1234), run(4321));
}

TEST(Sampler, CategoricalMatchesDistribution) {
  std::vector<float> base = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(p);
  std::map<int, int> counts;
  const int trials = 30000;
  for (int i = 0; i < trials; ++i) {
    auto l = base;
    counts[s.sample(l, {}, 0, i).token]++;
  }
  const double probs[3] = {0.5, 0.3, 0.2};
  for (int t = 0; t < 3; ++t) {
    double sigma = std::sqrt(trials * probs[t] * (1 - probs[t]));
    EXPECT_NEAR(counts[t], trials * probs[t], 4 * sigma) << t;
  }
}

TEST(Sampler, TopKKeepsExactlyK) {
  auto l0 = random_logits(200, 3);
  std::vector<int> idx(200);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l0[a] > l0[b]; });
  std::set<int> allowed(idx.begin(), idx.begin() + 5);
  SamplingParams p;
  p.temperature = 5.0f;  // flatten so every allowed token appears
  p.top_k = 5;
  p.seed = 1;
  Sampler s(p);
  std::set<int> seen;
  for (int i = 0; i < 3000; ++i) {
    auto l = l0;
    int t = s.sample(l, {}, 0, i).token;
    ASSERT_TRUE(allowed.count(t)) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen, allowed);
}

TEST(Sampler, TopPKeepsSmallestNucleus) {
  auto l0 = random_logits(100, 5, 2.0f);
  double z = 0;
  for (float x : l0) z += std::exp(static_cast<double>(x));
  std::vector<int> idx(100);
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l0[a] > l0[b]; });
  const double top_p = 0.7;
  std::set<int> nucleus;
  double mass = 0;
  for (int i : idx) {
    if (mass >= top_p) break;
    nucleus.insert(i);
    mass += std::exp(static_cast<double>(l0[i])) / z;
  }
  SamplingParams p;
  p.temperature = 3.0f;
  p.top_p = static_cast<float>(top_p);
  p.seed = 2;
  Sampler s(p);
  std::set<int> seen;
  for (int i = 0; i < 5000; ++i) {
    auto l = l0;
    int t = s.sample(l, {}, 0, i).token;
    ASSERT_TRUE(nucleus.count(t)) << t;
    seen.insert(t);
  }
  EXPECT_EQ(seen, nucleus);
}

TEST(Sampler, MinPDropsTokensBelowScaledTop) {
  std::vector<float> l0 = {0.0f, -1.0f, -2.0f, -3.0f, -10.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = std::exp(-2.5f);  // keeps logprob >= top - 2.5: ids 0, 1, 2
  p.seed = 3;
  Sampler s(p);
  std::set<int> seen;
  for (int i = 0; i < 4000; ++i) {
    auto l = l0;
    seen.insert(s.sample(l, {}, 0, i).token);
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
}

// The processed log-probabilities are the processed logits shifted by their log-sum-exp.
void expect_processed(const std::vector<float>& got, const std::vector<float>& logits) {
  double z = 0;
  for (float x : logits) z += std::exp(static_cast<double>(x));
  ASSERT_EQ(got.size(), logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(got[i], logits[i] - std::log(z), 1e-5) << "token " << i;
}

TEST(Sampler, PenaltiesFollowMlxLm) {
  std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.5f};
  std::vector<std::int32_t> hist = {0, 1, 1, 3, 3, 3};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  p.temperature = 1.0f;
  Sampler s(p);
  // repetition: positive / 2, negative * 2 (once per distinct token); presence: -0.5 once;
  // frequency: -0.25 per occurrence.
  expect_processed(s.processed_logprobs(l, hist),
                   {2.0f / 2 - 0.5f - 0.25f, -2.0f * 2 - 0.5f - 0.5f, 1.0f, 0.5f / 2 - 0.5f - 0.75f});
}

TEST(Sampler, PenaltyContextWindowLimitsHistory) {
  std::vector<float> l = {1.0f, 1.0f};
  std::vector<std::int32_t> hist = {0, 1, 1};
  SamplingParams p;
  p.frequency_penalty = 1.0f;
  p.frequency_context = 2;  // only the last two tokens (1, 1)
  p.temperature = 1.0f;
  Sampler s(p);
  expect_processed(s.processed_logprobs(l, hist), {1.0f, -1.0f});
}

TEST(Sampler, ValidateRejectsBadParams) {
  auto expect_bad = [](SamplingParams p, const char* needle) {
    try {
      p.validate(100);
      ADD_FAILURE() << "expected rejection for " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kBadInput);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  SamplingParams p;
  p.temperature = -1;
  expect_bad(p, "temperature");
  p = {};
  p.top_p = 0;
  expect_bad(p, "top_p");
  p = {};
  p.top_k = -3;
  expect_bad(p, "top_k");
  p = {};
  p.min_p = 2;
  expect_bad(p, "min_p");
  p = {};
  p.logit_bias = {{100, 1.0f}};
  expect_bad(p, "logit_bias");
  p = {};
  p.temperature = std::nanf("");
  expect_bad(p, "temperature");
  SamplingParams ok;
  EXPECT_NO_THROW(ok.validate(100));
}

TEST(StopMatcher, MatchesAcrossPiecesAndHoldsPrefixes) {
  StopMatcher m({"</s>", "STOP"});
  std::string out;
  for (const char* piece : {"Hello ", "wor", "ld <", "/", "s> never"}) {
    auto r = m.push(piece);
    out += r.emit;
    if (r.stopped) {
      EXPECT_EQ(r.which, 0);
      break;
    }
  }
  EXPECT_EQ(out, "Hello world ");
  EXPECT_TRUE(m.stopped());
}

TEST(StopMatcher, ReleasesFalseStartsAndFlushes) {
  StopMatcher m({"abc"});
  std::string out;
  out += m.push("xa").emit;  // "a" held back
  EXPECT_EQ(out, "x");
  out += m.push("bx").emit;  // "abx" is not a stop: released
  EXPECT_EQ(out, "xabx");
  out += m.push("ab").emit;
  out += m.flush();
  EXPECT_EQ(out, "xabxab");
}

TEST(StopMatcher, EarliestMatchWins) {
  StopMatcher m({"world", "lo w"});
  auto r = m.push("hello world");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.which, 1);
  EXPECT_EQ(r.emit, "hel");
}

namespace {
// The token an inverse-CDF draw at uniform `u` picks from log-probabilities `lp` at temperature t.
int inverse_cdf(const std::vector<float>& lp, double t, double u) {
  double best = -INFINITY, total = 0;
  for (float v : lp) best = std::max(best, static_cast<double>(v));
  for (float v : lp) total += std::exp((v - best) / t);
  u *= total;
  for (std::size_t i = 0; i < lp.size(); ++i) {
    u -= std::exp((lp[i] - best) / t);
    if (u < 0) return static_cast<int>(i);
  }
  return static_cast<int>(lp.size()) - 1;
}
}  // namespace

TEST(Sampler, DrawIsPhiloxAtSeedStreamPosition) {
  auto l0 = random_logits(300, 11, 1.0f);
  double z = 0;
  for (float x : l0) z += std::exp(static_cast<double>(x));
  std::vector<float> lp(l0.size());
  for (std::size_t i = 0; i < l0.size(); ++i) lp[i] = static_cast<float>(l0[i] - std::log(z));
  SamplingParams p;
  p.temperature = 0.7f;
  p.seed = 99;
  Sampler s(p, 0, 5);
  int differing = 0;
  for (int pos = 0; pos < 200; ++pos) {
    auto l = l0;
    int t = s.sample(l, {}, 0, pos).token;
    int expect = inverse_cdf(lp, 0.7, philox_uniform(99, 5, static_cast<std::uint64_t>(pos)));
    // The sampler's fp32 log-softmax may move a draw that lands on a CDF boundary by one token.
    differing += t != expect;
  }
  EXPECT_LE(differing, 1);
}

TEST(Sampler, DrawDependsOnPositionNotOnCallHistory) {
  auto l0 = random_logits(400, 12, 1.0f);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 2024;
  auto draw = [&](Sampler& s, int pos) {
    auto l = l0;
    return s.sample(l, {}, 0, pos).token;
  };
  Sampler forward(p), backward(p), fresh_each(p);
  std::vector<int> a(64), b(64);
  for (int pos = 0; pos < 64; ++pos) a[pos] = draw(forward, pos);
  for (int pos = 63; pos >= 0; --pos) {
    draw(backward, 1000 + pos);  // unrelated draws in between
    b[pos] = draw(backward, pos);
  }
  EXPECT_EQ(a, b);
  // The default position is the history length: the token after a 10-token prompt is position 10.
  std::vector<std::int32_t> hist(10, 3);
  auto l = l0;
  EXPECT_EQ(fresh_each.sample(l, hist).token, a[10]);
  // Another stream draws other numbers.
  Sampler other_stream(p, 0, 1);
  int same = 0;
  for (int pos = 0; pos < 64; ++pos) same += draw(other_stream, pos) == a[pos];
  EXPECT_LT(same, 48);
}

// The sampling op's shared arithmetic (backend/sample_math.h).
TEST(SampleMath, ExpNegIsAccurateAndMulHiIsExact) {
  using namespace mlxcel::backend;
  double worst = 0;
  for (float x = -27.9f; x <= 0.0f; x += 0.00137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(exp_neg(x) - want) / want);
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(exp_neg(0.0f), 1.0f);
  EXPECT_EQ(exp_neg(-29.0f), 0.0f);
  EXPECT_EQ(exp_neg(-INFINITY), 0.0f);
  EXPECT_EQ(sample_weight(0.0f), std::uint64_t{1} << 40);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 100000; ++i) {
    const std::uint64_t a = rng(), b = i % 7 == 0 ? rng() >> (i % 64) : rng();
    const auto want = static_cast<std::uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
    ASSERT_EQ(mul_hi64(a, b), want) << a << " * " << b;
  }
  EXPECT_EQ(mul_hi64(~0ull, ~0ull), ~0ull - 1);
}
