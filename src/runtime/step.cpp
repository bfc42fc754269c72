#include "runtime/step.h"

#include <algorithm>

#include "core/error.h"

namespace mlxcel::runtime {

ops::StepInputs build_step(const models::Model& model, std::span<BatchItem> batch) {
  ops::StepInputs s;
  s.n_seqs = static_cast<std::int64_t>(batch.size());
  MLXCEL_CHECK(!batch.empty(), ErrorCategory::kInternal, "forward: empty batch");
  std::vector<std::int64_t> starts(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& it = batch[i];
    MLXCEL_CHECK(!it.tokens.empty(), ErrorCategory::kInternal, "forward: empty batch item");
    MLXCEL_CHECK(&it.kv->pool() == &batch[0].kv->pool(), ErrorCategory::kInternal,
                 "forward: batch items use different KV pools");
    starts[i] = it.kv->reserve(static_cast<std::int64_t>(it.tokens.size()));
    for (std::size_t j = 0; j < it.tokens.size(); ++j) {
      s.tokens.push_back(it.tokens[j]);
      s.positions.push_back(static_cast<std::int32_t>(starts[i] + static_cast<std::int64_t>(j)));
      s.seq_of_token.push_back(static_cast<std::int32_t>(i));
    }
    s.max_blocks = std::max<std::int64_t>(s.max_blocks, static_cast<std::int64_t>(it.kv->block_table().size()));
  }
  s.block_tables.assign(static_cast<std::size_t>(s.n_seqs * s.max_blocks), -1);
  std::int32_t row = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const auto& table = batch[i].kv->block_table();
    std::copy(table.begin(), table.end(), s.block_tables.begin() + static_cast<std::ptrdiff_t>(i) * s.max_blocks);
    const auto n = static_cast<std::int32_t>(batch[i].tokens.size());
    s.seq_lens.push_back(static_cast<std::int32_t>(starts[i]) + n);
    const std::int32_t first = batch[i].all_logits ? row : row + n - 1;
    const std::int32_t count = batch[i].all_logits ? n : 1;
    for (std::int32_t r = 0; r < count; ++r) s.logit_rows.push_back(first + r);
    s.logit_count.push_back(count);
    row += n;
  }
  // CPU `--numerics mlx`: replay mlx-lm's rotating sliding-window cache to get its key order.
  std::int64_t window = 0;
  for (std::int64_t w : model.config().layer_window) window = std::max(window, w);
  if (model.backend().wants_window_order() && window > 0) {
    s.window_order.assign(batch.size(), {});
    for (std::size_t i = 0; i < batch.size(); ++i) {
      RotatingOrder& ro = batch[i].kv->rotating_order();
      const auto n = static_cast<std::int64_t>(batch[i].tokens.size());
      if (ro.max_size() != window || ro.offset() != starts[i]) {
        ro.reset(window);
        if (starts[i] > 0) ro.update(starts[i]);  // a reused prefix counts as one prefill
      }
      ro.update(n);
      if (n == 1) s.window_order[i] = ro.keys();
    }
  }
  return s;
}

ops::Act forward_step_device(models::Model& model, std::span<BatchItem> batch) {
  const ops::StepInputs s = build_step(model, batch);
  const ops::Act logits = model.forward_logits(s, batch[0].kv->pool().layout());
  for (auto& it : batch) it.kv->commit(it.tokens);
  return logits;
}

void forward_step(models::Model& model, std::span<BatchItem> batch,
                  std::vector<std::vector<float>>& logits) {
  const ops::StepInputs s = build_step(model, batch);
  model.forward(s, batch[0].kv->pool().layout(), logits);
  for (auto& it : batch) it.kv->commit(it.tokens);
}

}  // namespace mlxcel::runtime
