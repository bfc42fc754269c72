#pragma once
// A loaded model: runs one forward step over a batch of sequences (continuous batching: prefill
// chunks and single decode tokens mix in one step; the dense layers see all tokens of the step at
// once, so each weight is read once per step). The runtime builds the step's metadata and owns
// the paged KV cache; a model only speaks ops (src/ops), never a backend or a numerics mode.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/model_config.h"
#include "models/weights.h"
#include "ops/ops.h"
#include "ops/step.h"
#include "ops/step_graphs.h"

namespace mlxcel::models {

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }

  // Runs `step` (tokens at their positions, K/V appended to `kv` at the slots the step's block
  // tables give) and returns the wanted logits rows ([step.logit_rows.size(), vocab], in that
  // order) on the device; the view stays valid until the next forward.
  virtual ops::Act forward_logits(const ops::StepInputs& step, const ops::KvLayout& kv) = 0;
  // The same with the logits copied to the host: logits[i] holds sequence i's wanted rows
  // (logit_count[i] × vocab, fp32). For traces; generation samples on the device.
  void forward(const ops::StepInputs& step, const ops::KvLayout& kv,
               std::vector<std::vector<float>>& logits);

  // The KV layout this model needs (base unset; the runtime's pool allocates it). The cache dtype
  // defaults to the activation dtype: K and V are already rounded to it, so a bf16 model's cache
  // holds them exactly in half the memory.
  ops::KvLayout kv_layout(std::int64_t num_blocks, int block_size = 32,
                          std::optional<DType> dtype = std::nullopt) const;
  // The dtype every op rounds its output to (the checkpoint's; F32 when unrounded).
  DType activation_dtype() const { return exec_.act(); }
  virtual std::size_t weight_bytes() const = 0;
  // Bytes of weights one decode step must read (embedding: one row; MoE: the router plus the
  // average share of active experts), the numerator of the decode bandwidth ceiling.
  virtual std::size_t decode_bytes_per_token() const = 0;
  // The op signatures a forward step runs (missing_ops checks them against the backend).
  virtual std::vector<ops::OpSignature> required_ops() const = 0;

  // Every op signature a forward step of this model needs that the backend does not claim
  // (names as OpSignature::str gives them); empty when it runs entirely on the backend. The
  // loader refuses a model with the whole list rather than failing at the first op mid-step.
  std::vector<std::string> missing_ops() const;

  // Decode steps run eagerly, recorded and replayed so far (ops/step_graphs.h).
  virtual ops::StepGraphs::Stats graph_stats() const { return {}; }

  ops::Backend& backend() const { return exec_.backend(); }
  const ops::Exec& exec() const { return exec_; }
  // Debugging aid (`mlxcel trace --dump`): every named intermediate of each forward step.
  void set_tap(ops::Tap tap) { exec_.tap = std::move(tap); }

 protected:
  Model(ModelConfig c, ops::Exec e) : config_(std::move(c)), exec_(std::move(e)) {}
  ModelConfig config_;
  ops::Exec exec_;
};

// Builds the model of `config.family` from `weights`, uploading them through `be`; throws
// bad_input for missing or mismatched tensors and unsupported for a family without an
// implementation or an op the backend lacks.
std::unique_ptr<Model> build_model(const ModelConfig& config, const WeightSource& weights,
                                   ops::Backend& be);

}  // namespace mlxcel::models
