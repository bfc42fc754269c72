#pragma once
// The step sequence that the step-recording checks (ops/step_graphs.h: the tests and `mlxcel
// selftest`) run on a model: three prompts prefilled one by one, then 36 decode steps (`a`
// alone, then a+b, then a+b+c) with a prefill chunk of a fourth sequence between the phases. Input tokens are fixed (teacher forced), so two
// runs compute the same steps; with 4-token KV blocks the sequences cross many blocks, so the
// block-table bucket grows during each phase.
#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/step.h"
#include "selftest/tiny_model.h"

namespace mlxcel::testing_models {

// The families the step-recording tests run the scenario on (dense, MoE, sliding window with
// sandwich norms, fused qkv).
inline constexpr const char* kStepScenarioFamilies[] = {"llama", "qwen3", "qwen3_moe",
                                                        "gemma3_text", "phi3"};

// Every wanted logits row of every step, in order.
inline std::vector<std::vector<float>> run_step_scenario(models::Model& model,
                                                         runtime::KvBlockPool& pool) {
  using runtime::BatchItem;
  runtime::SequenceKv a(pool), b(pool), c(pool), d(pool);
  std::vector<std::vector<float>> rows, out;
  auto step = [&](std::vector<BatchItem> batch) {
    runtime::forward_step(model, batch, out);
    for (auto& r : out) rows.push_back(r);
  };
  const auto pa = prompt(9, 1), pb = prompt(5, 2), pc = prompt(14, 3),
             pd = prompt(23, 4);
  step({{&a, pa, false}});
  step({{&b, pb, false}});
  step({{&c, pc, false}});
  const std::int64_t vocab = model.config().vocab_size;
  std::int32_t next[3];
  runtime::SequenceKv* kv[3] = {&a, &b, &c};
  for (int s = 0; s < 36; ++s) {
    const int n = s < 12 ? 1 : s < 24 ? 2 : 3;
    if (s == 12 || s == 24)
      step({{&d, std::span<const std::int32_t>(pd).subspan(s == 12 ? 0 : 11, 11), false}});
    std::vector<BatchItem> batch;
    for (int i = 0; i < n; ++i) {
      next[i] = static_cast<std::int32_t>((s * 7 + i * 31 + 3) % vocab);
      batch.push_back({kv[i], std::span<const std::int32_t>(&next[i], 1), false});
    }
    step(batch);
  }
  return rows;
}

}  // namespace mlxcel::testing_models
