// The one scheduler (runtime/scheduler.h) on tiny random models: sequences batched together get
// exactly the tokens and log-probabilities they get alone; EOS, max_tokens, the context limit and
// an observer's stop end a sequence with the right reason; a sequence whose logits are not finite
// fails alone while the others in its steps go on.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <map>

#include "backend/cpu/cpu_backend.h"
#include "runtime/kv_cache.h"
#include "runtime/scheduler.h"
#include "selftest/tiny_model.h"

using namespace mlxcel;
using namespace mlxcel::runtime;
using namespace mlxcel::testing_models;

namespace {

struct Recorder final : SequenceObserver {
  std::vector<std::int32_t> tokens;
  std::vector<float> logprobs;
  std::string reason;
  std::string error;
  std::int64_t prefilled = 0;
  SequenceStats last;
  int stop_after = -1;  // return kStop after this many tokens
  void on_prefill(std::int64_t n, bool) override { prefilled += n; }
  Verdict on_token(const SampleResult& r, bool eos, const SequenceStats&) override {
    if (eos) return Verdict::kContinue;
    tokens.push_back(r.token);
    logprobs.push_back(r.logprob);
    return stop_after >= 0 && static_cast<int>(tokens.size()) >= stop_after ? Verdict::kStop
                                                                            : Verdict::kContinue;
  }
  void on_finish(const std::string& why, const SequenceStats& s) override {
    reason = why;
    last = s;
  }
  void on_error(const Error& e, const SequenceStats&) override { error = e.what(); }
};

struct TinyEngine {
  Tiny t;
  cpu::CpuBackend be;
  std::unique_ptr<models::Model> model;
  std::unique_ptr<KvBlockPool> pool;
  explicit TinyEngine(const char* family, bool quantize = true) : t(make(family, quantize)) {
    model = models::build_model(t.cfg, t.w, be);
    pool = std::make_unique<KvBlockPool>(model->kv_layout(256, 4), &be);
  }
  Scheduler scheduler(int n, std::int64_t ctx = 128, std::int64_t chunk = 4) {
    return Scheduler(*model, *pool, SchedulerOptions{n, ctx, chunk});
  }
};

SequenceRequest greedy(std::vector<std::int32_t> prompt, std::int64_t max_tokens) {
  SequenceRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.reuse_prefix = false;
  return r;
}

void run_all(Scheduler& s) {
  while (!s.idle()) s.step();
}

}  // namespace

TEST(Scheduler, BatchedSequencesGetTheTokensTheyGetAlone) {
  TinyEngine st("qwen3");
  const std::vector<std::vector<std::int32_t>> prompts = {prompt(3, 11), prompt(9, 12), prompt(14, 13)};
  std::vector<Recorder> alone(prompts.size()), together(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    Scheduler s = st.scheduler(1);
    s.add(greedy(prompts[i], 12), &alone[i]);
    run_all(s);
  }
  Scheduler s = st.scheduler(3);
  for (std::size_t i = 0; i < prompts.size(); ++i) s.add(greedy(prompts[i], 12), &together[i]);
  run_all(s);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << "sequence " << i;
    ASSERT_EQ(together[i].logprobs.size(), alone[i].logprobs.size());
    EXPECT_EQ(std::memcmp(together[i].logprobs.data(), alone[i].logprobs.data(),
                          alone[i].logprobs.size() * sizeof(float)), 0) << "sequence " << i;
    EXPECT_EQ(together[i].reason, "length");
    EXPECT_EQ(together[i].prefilled, static_cast<std::int64_t>(prompts[i].size()));
    EXPECT_EQ(together[i].tokens.size(), 12u);
  }
}

TEST(Scheduler, EndsOnEosMaxTokensContextAndObserverStop) {
  TinyEngine st("llama");
  auto p = prompt(5, 3);
  Recorder probe;
  {
    Scheduler s = st.scheduler(1);
    s.add(greedy(p, 6), &probe);
    run_all(s);
  }
  ASSERT_EQ(probe.tokens.size(), 6u);
  EXPECT_EQ(probe.reason, "length");
  EXPECT_EQ(probe.last.generated, 6);

  // The third greedy token as EOS: two tokens, then "stop" (EOS itself not counted).
  Recorder eos;
  {
    Scheduler s = st.scheduler(1);
    SequenceRequest r = greedy(p, 6);
    r.eos_ids = {probe.tokens[2]};
    s.add(r, &eos);
    run_all(s);
  }
  EXPECT_EQ(eos.reason, "stop");
  EXPECT_EQ(eos.last.generated, 2);

  // Context limit 8 with a 5-token prompt: 3 tokens, then "length".
  Recorder ctx;
  {
    Scheduler s = st.scheduler(1, 8);
    s.add(greedy(p, 0), &ctx);
    run_all(s);
  }
  EXPECT_EQ(ctx.reason, "length");
  EXPECT_EQ(ctx.tokens.size(), 3u);

  Recorder stop;
  stop.stop_after = 4;
  {
    Scheduler s = st.scheduler(1);
    s.add(greedy(p, 6), &stop);
    run_all(s);
  }
  EXPECT_EQ(stop.reason, "stop");
  EXPECT_EQ(stop.tokens.size(), 4u);
}

TEST(Scheduler, CallerFinishAndValidation) {
  TinyEngine st("qwen2");
  Scheduler s = st.scheduler(2, 16);
  Recorder a;
  const auto id = s.add(greedy(prompt(4, 1), 50), &a);
  s.step();
  s.finish(id, "cancelled");
  EXPECT_EQ(a.reason, "cancelled");
  EXPECT_TRUE(s.idle());
  Recorder b;
  EXPECT_THROW(s.add(greedy({}, 4), &b), Error);
  EXPECT_THROW(s.add(greedy(prompt(16, 2), 4), &b), Error);  // fills the context
  EXPECT_THROW(s.add(greedy({1, 2, 100000}, 4), &b), Error);
  EXPECT_TRUE(s.idle());
}

TEST(Scheduler, NonFiniteLogitsFailOnlyTheirSequence) {
  // phi3's fixture has an untied lm_head: a NaN embedding row poisons only the sequences that
  // contain that token.
  Tiny t = make("phi3", false);
  const std::int32_t poisoned = 7;
  Tensor& emb = t.w.tensors["model.embed_tokens.weight"];
  std::vector<float> v = emb.to_f32();
  for (std::int64_t k = 0; k < emb.dim(1); ++k)
    v[static_cast<std::size_t>(poisoned * emb.dim(1) + k)] = std::numeric_limits<float>::quiet_NaN();
  emb = Tensor::from_f32(v, emb.shape(), emb.dtype());
  cpu::CpuBackend be;
  auto model = models::build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(256, 4), &be);
  auto clean = prompt(6, 4);
  for (auto& x : clean) if (x == poisoned) x = poisoned + 1;
  Recorder alone;
  {
    Scheduler s(*model, pool, SchedulerOptions{1, 64, 4});
    s.add(greedy(clean, 8), &alone);
    run_all(s);
  }
  Recorder good, bad;
  Scheduler s(*model, pool, SchedulerOptions{2, 64, 4});
  s.add(greedy({1, poisoned, 3}, 8), &bad);
  s.add(greedy(clean, 8), &good);
  run_all(s);
  EXPECT_NE(bad.error.find("non-finite"), std::string::npos) << bad.error;
  EXPECT_TRUE(bad.reason.empty());
  EXPECT_TRUE(good.error.empty()) << good.error;
  EXPECT_EQ(good.tokens, alone.tokens);
  EXPECT_EQ(good.reason, "length");
}

// A backend that lacks some ops: the model lists every missing signature at load (the loader
// refuses with the whole list), rather than failing at the first op in the middle of a step.
namespace {
class PartialBackend : public mlxcel::cpu::CpuBackend {
 public:
  using CpuBackend::CpuBackend;
  bool supports(const mlxcel::backend::OpSignature& s) const override {
    return s.op != mlxcel::backend::Op::kAttention && s.op != mlxcel::backend::Op::kSample &&
           CpuBackend::supports(s);
  }
};
}  // namespace

TEST(Model, MissingOpsListsEverySignatureTheBackendLacks) {
  auto t = mlxcel::testing_models::make("qwen3", true);
  PartialBackend partial(mlxcel::backend::Numerics::kFast);
  auto m = mlxcel::models::build_model(t.cfg, t.w, partial);
  const auto missing = m->missing_ops();
  ASSERT_EQ(missing.size(), 2u);
  EXPECT_NE(missing[0].find("attention"), std::string::npos) << missing[0];
  EXPECT_NE(missing[1].find("sample"), std::string::npos) << missing[1];
  mlxcel::cpu::CpuBackend full(mlxcel::backend::Numerics::kFast);
  EXPECT_TRUE(mlxcel::models::build_model(t.cfg, t.w, full)->missing_ops().empty());
}
