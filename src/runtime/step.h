#pragma once
// One forward step over a batch of sequences: the runtime reserves KV space, builds the step's
// metadata (tokens, positions, block tables, sequence lengths, logit rows) for the model, runs it
// and commits the written tokens. Every caller (generation, the server's scheduler, traces,
// benchmarks) steps a model through here, so the metadata is built in one place.
#include <cstdint>
#include <span>
#include <vector>

#include "models/model.h"
#include "runtime/kv_cache.h"

namespace mlxcel::runtime {

struct BatchItem {
  SequenceKv* kv = nullptr;
  std::span<const std::int32_t> tokens;  // appended after kv->length()
  bool all_logits = false;               // logits for every token (traces), else the last only
};

// logits[i] holds item i's rows (tokens.size() × vocab when all_logits, else vocab). All items
// must use the same pool.
void forward_step(models::Model& model, std::span<BatchItem> batch,
                  std::vector<std::vector<float>>& logits);

// The same, leaving the wanted logits rows on the device (item i's last row is row i when no item
// asks for all logits); valid until the model's next forward.
ops::Act forward_step_device(models::Model& model, std::span<BatchItem> batch);

// Builds the metadata of a step (reserving KV space); exposed for tests.
ops::StepInputs build_step(const models::Model& model, std::span<BatchItem> batch);

}  // namespace mlxcel::runtime
