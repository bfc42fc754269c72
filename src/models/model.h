#pragma once
// A loaded model: runs one forward step over a batch of sequences, each bringing new tokens
// and its own paged KV cache (continuous batching: prefill chunks and single decode tokens mix
// in one step; the dense layers see all tokens of the step at once, so each weight is read once
// per step).
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <span>
#include <vector>

#include "models/model_config.h"
#include "models/weights.h"
#include "models/kv_cache.h"

namespace mlxcel::models {

// How the CPU kernels round. kFast accumulates every matmul in fp32 (what MLX's Metal and CUDA
// backends do); kMlx reproduces MLX's CPU backend bit for bit, whose quantized matmul
// accumulates in the activation dtype (backend/cpu/mlx_matmul.h). Activations are rounded to
// the checkpoint's dtype where MLX materializes them in both modes.
enum class Numerics : std::uint8_t { kFast = 0, kMlx = 1 };
const char* numerics_name(Numerics n);

struct BatchItem {
  SequenceKv* kv = nullptr;
  std::span<const std::int32_t> tokens;  // appended after kv->length()
  bool all_logits = false;               // logits for every token (traces), else the last only
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }

  // logits[i] holds item i's rows (tokens.size() × vocab when all_logits, else vocab). Appends
  // the tokens' K/V to each item's cache and commits them.
  virtual void forward(std::span<BatchItem> batch, std::vector<std::vector<float>>& logits) = 0;

  // The KV layout this model needs; the caller picks the block count. The cache dtype defaults
  // to the activation dtype: K and V are already rounded to it, so a bf16 model's cache holds
  // them exactly in half the memory.
  KvCacheConfig kv_config(std::int64_t num_blocks, int block_size = 32,
                          std::optional<DType> dtype = std::nullopt) const;
  // The dtype activations are rounded to between ops (the checkpoint's; F32 when unrounded).
  virtual DType activation_dtype() const { return DType::kF32; }
  virtual std::size_t weight_bytes() const = 0;
  // Bytes of weights one decode step must read (embedding: one row; MoE: the router plus the
  // average share of active experts), the numerator of the decode bandwidth ceiling.
  virtual std::size_t decode_bytes_per_token() const = 0;

  // Debugging aid (`mlxcel trace --dump`): when set, called with every named intermediate of a
  // forward step (rows x cols fp32, one row per token of the step; layer -1 for model-level
  // tensors). Names follow scripts/layer_diff.py.
  using Tap = std::function<void(const char* name, int layer, const float* data,
                                 std::int64_t rows, std::int64_t cols)>;
  Tap tap;

  Numerics numerics() const { return numerics_; }
  void set_numerics(Numerics n) { numerics_ = n; }

 protected:
  explicit Model(ModelConfig c) : config_(std::move(c)) {}
  ModelConfig config_;
  Numerics numerics_ = Numerics::kFast;
};

// Builds the model of `config.family` from `weights`; throws bad_input for missing or
// mismatched tensors and unsupported for a family without an implementation.
std::unique_ptr<Model> build_model(const ModelConfig& config, const WeightSource& weights);

}  // namespace mlxcel::models
