// Step recording (ops/step_graphs.h) checked on the CPU: RecordingCpu records ops the way a GPU
// graph does, keeping each op's argument struct between begin_capture and end_capture without
// running it and running the kept ops unchanged on replay. A replayed step therefore reads only
// what the arguments point at, so these tests catch a model or op that bakes a per-step value
// into an op's arguments, a block-table bucket that changes results, and stale recordings kept
// across reallocations; the GPU twin (tests/backend_ops/test_step_graphs.cpp) runs on devices.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "core/error.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "selftest/step_scenario.h"
#include "selftest/tiny_model.h"

using namespace mlxcel;
using namespace mlxcel::runtime;
using namespace mlxcel::testing_models;
namespace be_ = mlxcel::backend;

namespace {

class RecordingCpu final : public cpu::CpuBackend {
 public:
  // Replays skip the recording's last op (a wrong recording the check must catch).
  bool drop_last = false;
  // Recording fails (an op throws, as a GPU op does when it must grow a buffer).
  bool refuse = false;
  int replays = 0;
  std::uint64_t epoch = 0;  // what capture_epoch reports (a GPU bumps it when scratch moves)

  bool can_capture() const override { return true; }
  std::uint64_t capture_epoch() const override { return epoch; }
  void begin_capture() override {
    ASSERT_FALSE(rec_) << "nested recording";
    rec_ = std::make_unique<Rec>();
  }
  std::unique_ptr<be_::Recording> end_capture() override { return std::move(rec_); }
  void replay(const be_::Recording& r) override {
    const auto& ops = dynamic_cast<const Rec&>(r).ops;
    for (std::size_t i = 0; i + (drop_last ? 1 : 0) < ops.size(); ++i) ops[i]();
    ++replays;
  }

  void embed(const be_::EmbedArgs& a) override { op([=, this] { CpuBackend::embed(a); }); }
  void rms_norm(const be_::RmsNormArgs& a) override { op([=, this] { CpuBackend::rms_norm(a); }); }
  void add(const be_::AddArgs& a) override { op([=, this] { CpuBackend::add(a); }); }
  void add_rms_norm(const be_::AddRmsNormArgs& a) override {
    op([=, this] { CpuBackend::add_rms_norm(a); });
  }
  void linear(const be_::LinearArgs& a) override { op([=, this] { CpuBackend::linear(a); }); }
  void rope_kv_append(const be_::RopeKvAppendArgs& a) override {
    op([=, this] { CpuBackend::rope_kv_append(a); });
  }
  void attention(const be_::AttentionArgs& a) override {
    op([=, this] { CpuBackend::attention(a); });
  }
  void gated_activation(const be_::GatedActivationArgs& a) override {
    op([=, this] { CpuBackend::gated_activation(a); });
  }
  void moe_route(const be_::MoeRouteArgs& a) override {
    op([=, this] { CpuBackend::moe_route(a); });
  }
  void moe_experts(const be_::MoeExpertsArgs& a) override {
    op([=, this] { CpuBackend::moe_experts(a); });
  }
  void gather_rows(const be_::GatherRowsArgs& a) override {
    op([=, this] { CpuBackend::gather_rows(a); });
  }

 private:
  struct Rec final : be_::Recording {
    std::vector<std::function<void()>> ops;
  };
  template <typename F>
  void op(F f) {
    if (!rec_) return f();
    if (refuse) throw_error(ErrorCategory::kInternal, "RecordingCpu: refusing to record");
    rec_->ops.push_back(std::move(f));
  }
  std::unique_ptr<Rec> rec_;
};

using Rows = std::vector<std::vector<float>>;

Rows reference(const Tiny& t) {
  cpu::CpuBackend be;
  auto model = models::build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(96, 4), &be);
  return run_step_scenario(*model, pool);
}

void expect_same(const Rows& want, const Rows& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].size(), got[i].size()) << what;
    EXPECT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
        << what << ": logits row " << i << " differs";
  }
}

class StepGraphsCpu : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

// One sequence prefilled with 9 tokens, then one decode step of a single token run eagerly (the
// shape's first sight). The next step() of this shape is recorded and checked; the one after
// that replays. Set `tok` before a step to decode another id.
struct OneDecodeShape {
  SequenceKv seq;
  std::int32_t tok = 5;
  std::vector<BatchItem> items;
  Rows out;

  OneDecodeShape(models::Model& model, KvBlockPool& pool) : seq(pool) {
    const auto p = prompt(9, 1);
    std::vector<BatchItem> pre = {{&seq, p, false}};
    runtime::forward_step(model, pre, out);
    items = {{&seq, std::span<const std::int32_t>(&tok, 1), false}};
    step(model);
  }
  OneDecodeShape(const OneDecodeShape&) = delete;  // items point at tok
  void step(models::Model& model) { runtime::forward_step(model, items, out); }
};

}  // namespace

TEST_P(StepGraphsCpu, ReplayEqualsEagerBitForBit) {
  auto [type, quantize] = GetParam();
  const Tiny t = make(type, quantize);
  RecordingCpu be;
  auto model = models::build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(96, 4), &be);
  const Rows got = run_step_scenario(*model, pool);
  const ops::StepGraphs::Stats st = model->graph_stats();
  // Shapes: decode batches of 1, 2 and 3 sequences at each block bucket (prefills run eagerly):
  // most decode steps replay.
  EXPECT_GT(st.recorded, 2);
  EXPECT_GT(st.replayed, 20) << "eager " << st.eager << ", recorded " << st.recorded;
  EXPECT_EQ(st.failed, 0);
  EXPECT_FALSE(st.off);
  // Every recording was replayed once for its check, then once per replayed step.
  EXPECT_EQ(be.replays, st.recorded + st.replayed);
  expect_same(reference(t), got, type);
}

INSTANTIATE_TEST_SUITE_P(Families, StepGraphsCpu,
                         ::testing::Combine(::testing::ValuesIn(kStepScenarioFamilies),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_q4" : "_bf16");
                         });

// A recording that replays wrong (its last op, the output projection, skipped) fails the check:
// that step throws instead of returning wrong logits, recording turns off, and every later step
// runs op by op with the reference's logits.
TEST(StepGraphsCpuCheck, WrongRecordingFailsItsStepAndTurnsRecordingOff) {
  const Tiny t = make("qwen3", true);
  RecordingCpu be;
  be.drop_last = true;
  auto model = models::build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(96, 4), &be);
  {
    OneDecodeShape d(*model, pool);
    d.tok = 6;
    try {
      d.step(*model);  // recorded, and its check fails
      ADD_FAILURE() << "a wrong recording passed its check";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kInternal);
      EXPECT_NE(std::string(e.what()).find("recorded decode step"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(model->graph_stats().off);
  const int replays = be.replays;
  const Rows got = run_step_scenario(*model, pool);
  EXPECT_EQ(be.replays, replays);
  EXPECT_EQ(model->graph_stats().replayed, 0);
  expect_same(reference(t), got, "after a failed check");
}

// Recording that fails (an op throws while recording, as a GPU op must grow a buffer) runs the
// step eagerly: the logits match the reference, nothing is kept, and a shape stops being retried
// after two failures.
TEST(StepGraphsCpuCheck, RefusedRecordingRunsEagerly) {
  const Tiny t = make("llama", true);
  RecordingCpu be;
  be.refuse = true;
  auto model = models::build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(96, 4), &be);
  const Rows got = run_step_scenario(*model, pool);
  const ops::StepGraphs::Stats st = model->graph_stats();
  EXPECT_EQ(st.recorded, 0);
  EXPECT_EQ(st.replayed, 0);
  EXPECT_GT(st.failed, 2);
  EXPECT_EQ(be.replays, 0);
  expect_same(reference(t), got, "refused recordings");
}

// Recordings are dropped when what they address changes (another workspace, step block or KV
// pool; the backend's epoch): a stale one replayed would write the old buffers. One op stands for
// a step here: y = a + b, with a the per-step value read from memory.
TEST(StepGraphsCpuCheck, StaleRecordingsAreDropped) {
  RecordingCpu be;
  const ops::Exec e(be, DType::kF32);
  struct Set {
    std::vector<float> a = std::vector<float>(8), b = std::vector<float>(8, 0.5f),
                       y = std::vector<float>(8);
    ops::Act act(std::vector<float>& v) { return ops::Act{v.data(), DType::kF32, 1, 8, 8}; }
  } s1, s2;
  ops::StepGraphs g;
  const ops::StepGraphs::Shape shape{1, 1, 1, 4};
  auto step = [&](Set& s, float v) {
    std::fill(s.a.begin(), s.a.end(), v);
    const ops::StepGraphs::Memory mem{s.y.data(), 8, s.a.data(), 8, nullptr, 0, be.epoch};
    g.run(e, shape, mem, [&] { ops::add(e, s.act(s.a), s.act(s.b), s.act(s.y)); }, s.act(s.y));
    return s.y[7];
  };
  EXPECT_EQ(step(s1, 1.0f), 1.5f);  // eager
  EXPECT_EQ(step(s1, 2.0f), 2.5f);  // recorded, checked
  EXPECT_EQ(step(s1, 3.0f), 3.5f);  // replayed
  EXPECT_EQ(g.stats().replayed, 1);
  EXPECT_EQ(step(s2, 4.0f), 4.5f);  // other buffers: not the recording of s1
  EXPECT_EQ(g.stats().replayed, 1);
  EXPECT_EQ(step(s2, 5.0f), 5.5f);
  EXPECT_EQ(step(s2, 6.0f), 6.5f);
  EXPECT_EQ(g.stats().replayed, 2);
  ++be.epoch;  // the backend moved a buffer of its own
  EXPECT_EQ(step(s2, 7.0f), 7.5f);
  EXPECT_EQ(g.stats().replayed, 2);
  EXPECT_EQ(g.stats().recorded, 2);
  EXPECT_EQ(g.stats().eager, 3);
}

// A replayed step runs none of its ops' host code, so the token ids are checked before the
// replay: an id outside the vocabulary is a bad_input error, as it is when the step runs op by op.
TEST(StepGraphsCpuCheck, ReplayedStepStillRefusesBadTokenIds) {
  const Tiny t = make("llama", true);
  RecordingCpu be;
  auto model = models::build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(96, 4), &be);
  OneDecodeShape d(*model, pool);
  d.step(*model);  // recorded
  ASSERT_EQ(model->graph_stats().recorded, 1);
  d.tok = static_cast<std::int32_t>(t.cfg.vocab_size);
  try {
    d.step(*model);
    ADD_FAILURE() << "token id " << d.tok << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kBadInput) << e.what();
  }
  EXPECT_EQ(model->graph_stats().replayed, 0);  // refused before the replay
}
