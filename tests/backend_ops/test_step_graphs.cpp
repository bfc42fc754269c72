// Recorded decode steps (ops/step_graphs.h, DESIGN.md "Decode is captured"): every family's
// logits from steps replayed from a recording are bit-identical to the same steps run op by op
// (selftest/step_scenario.h: batches of 1-3 sequences crossing KV blocks, prefill chunks between).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/gpu/runtime.h"
#include "gpu_test_util.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "selftest/step_scenario.h"
#include "selftest/tiny_model.h"

using namespace mlxcel;
using namespace mlxcel::runtime;
using namespace mlxcel::testing_models;

namespace {

struct Trace {
  std::vector<std::vector<float>> rows;  // every wanted logits row of every step, in order
  ops::StepGraphs::Stats stats;
  bool captured = false;
};

Trace run(const Tiny& t, bool graphs) {
  Trace tr;
  auto be = backend::create_backend(gpu::compiled_backend());
  tr.captured = be->set_capture(graphs);
  auto model = models::build_model(t.cfg, t.w, *be);
  KvBlockPool pool(model->kv_layout(96, 4), be.get());
  tr.rows = run_step_scenario(*model, pool);
  tr.stats = model->graph_stats();
  return tr;
}

class StepGraphsTest : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

}  // namespace

TEST_P(StepGraphsTest, ReplayEqualsEagerBitForBit) {
  MLXCEL_REQUIRE_GPU_OR_SKIP();
  auto [type, quantize] = GetParam();
  const Tiny t = make(type, quantize);
  const Trace eager = run(t, false), graph = run(t, true);
  ASSERT_FALSE(eager.captured);
  ASSERT_TRUE(graph.captured) << "the GPU backend refused to record (profiling or per-op sync on?)";
  EXPECT_EQ(eager.stats.recorded + eager.stats.replayed, 0);
  // Shapes: decode batches of 1, 2 and 3 sequences at growing block buckets (prefills run
  // eagerly). Most decode steps replay.
  EXPECT_GT(graph.stats.recorded, 2);
  EXPECT_GT(graph.stats.replayed, 12) << "recorded " << graph.stats.recorded << ", eager "
                                      << graph.stats.eager << ", failed " << graph.stats.failed;
  EXPECT_EQ(graph.stats.failed, 0);
  ASSERT_EQ(eager.rows.size(), graph.rows.size());
  for (std::size_t i = 0; i < eager.rows.size(); ++i) {
    ASSERT_EQ(eager.rows[i].size(), graph.rows[i].size());
    for (float x : eager.rows[i]) ASSERT_TRUE(std::isfinite(x));
    EXPECT_EQ(std::memcmp(eager.rows[i].data(), graph.rows[i].data(),
                          eager.rows[i].size() * sizeof(float)),
              0)
        << type << ": logits row " << i << " differs";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, StepGraphsTest,
                         ::testing::Combine(::testing::ValuesIn(kStepScenarioFamilies),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) ? "_q4" : "_bf16");
                         });
