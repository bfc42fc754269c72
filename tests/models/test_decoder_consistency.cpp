// Engine invariants on tiny random models built in memory, for every family and both numerics:
// decoding token by token through the paged KV cache gives the same logits as one prefill; a
// batch of sequences gives each the logits it gets alone; prefix reuse gives the logits of a full
// recompute. Bit for bit: the CPU kernels are row-stable (one reduction order per output whatever
// the number of rows, the tile or the thread split).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "models/decoder.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/step.h"
#include "selftest/tiny_model.h"
#include "quant/quantize.h"

using namespace mlxcel;
using namespace mlxcel::models;
using namespace mlxcel::runtime;
using namespace mlxcel::testing_models;

namespace {

// Index of the first logit whose bits differ, or -1.
long first_difference(const std::vector<float>& a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<long>(i);
  return -1;
}

class DecoderConsistency
    : public ::testing::TestWithParam<std::tuple<const char*, bool, backend::Numerics>> {};

}  // namespace

TEST_P(DecoderConsistency, IncrementalBatchedAndPrefixReuseAgree) {
  auto [type, quantize, numerics] = GetParam();
  Tiny t = make(type, quantize);
  cpu::CpuBackend be(numerics);
  auto model = build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(64, 4), &be);
  const int V = static_cast<int>(t.cfg.vocab_size);
  auto p = prompt(11, 1);

  // One prefill with every row's logits.
  SequenceKv full(pool);
  std::vector<std::vector<float>> out;
  std::vector<BatchItem> b = {{&full, p, true}};
  forward_step(*model, b, out);
  std::vector<float> ref = out[0];
  for (float x : ref) ASSERT_TRUE(std::isfinite(x));

  // Token by token.
  SequenceKv inc(pool);
  for (std::size_t i = 0; i < p.size(); ++i) {
    std::vector<BatchItem> one = {{&inc, std::span<const std::int32_t>(&p[i], 1), false}};
    forward_step(*model, one, out);
    EXPECT_EQ(first_difference(out[0], ref.data() + i * V, V), -1) << type << " position " << i;
  }

  // Two sequences in one batch: a decode step of `inc` beside a prefill of another prompt.
  auto p2 = prompt(7, 2);
  SequenceKv alone(pool);
  std::vector<BatchItem> a = {{&alone, p2, false}};
  forward_step(*model, a, out);
  std::vector<float> alone_logits = out[0];
  SequenceKv other(pool), inc_copy(pool);
  std::vector<BatchItem> pre = {{&inc_copy, p, false}};
  forward_step(*model, pre, out);
  std::int32_t next = 3;
  std::vector<BatchItem> mixed = {{&inc_copy, std::span<const std::int32_t>(&next, 1), false},
                                  {&other, p2, false}};
  forward_step(*model, mixed, out);
  EXPECT_EQ(first_difference(out[1], alone_logits.data(), V), -1) << type << " batched";

  // Prefix reuse: a sequence that starts with the cached 8-token prefix of `full`.
  auto p3 = p;
  p3.push_back(9);
  SequenceKv reuse(pool);
  EXPECT_EQ(reuse.reuse_prefix(p3), 8);
  std::vector<BatchItem> rest = {{&reuse, std::span<const std::int32_t>(p3).subspan(8), false}};
  forward_step(*model, rest, out);
  SequenceKv fresh(pool);
  std::vector<BatchItem> f = {{&fresh, p3, false}};
  std::vector<std::vector<float>> out2;
  forward_step(*model, f, out2);
  EXPECT_EQ(first_difference(out[0], out2[0].data(), V), -1) << type << " prefix reuse";
}

INSTANTIATE_TEST_SUITE_P(
    Families, DecoderConsistency,
    ::testing::Combine(::testing::Values("llama", "mistral", "qwen2", "qwen3", "qwen3_moe",
                                         "gemma3_text", "phi3"),
                       ::testing::Bool(),
                       ::testing::Values(backend::Numerics::kFast, backend::Numerics::kMlx)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_q4" : "_bf16") +
             "_" + backend::numerics_name(std::get<2>(info.param));
    });
