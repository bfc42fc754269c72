#pragma once
// One memory estimator for `mlxcel inspect`, `generate/serve --estimate-memory`, the refusal
// before loading, and the server's KV budget; and the memory the target device can give.
//
// The estimate counts what the runtime allocates, as it allocates it today:
// - weights: the exact tensor bytes declared by the safetensors headers (nothing is read but the
//   headers, so it is cheap for a 60 GB checkpoint);
// - KV cache: one pool of ceil(ctx / block_size) blocks per sequence, every layer at full
//   context (sliding-window layers are counted at full context because the pool allocates them
//   so; the plan reports how many there are), K and V of n_kv_heads x head_dim in the KV dtype;
// - activations: the step workspace models/decoder.cpp plans for a prefill chunk (hidden states,
//   fused and split q/k/v, attention output, the FFN's fused gate|up, gate, up and product, MoE
//   gates and picks), plus the logits of the sampled rows;
// - headroom: what the allocator and runtime need beyond the bytes asked for (size-class
//   rounding, the GPU context), only in the fit decision, never in the "allocations" figure that
//   is compared with Backend::memory_stats().peak.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "platform/devices.h"

namespace mlxcel::platform {

// Architecture numbers the estimate needs (from config.json, as the models layer reads it).
struct ModelShape {
  std::string model_type;
  std::int64_t n_layers = 0, hidden_size = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::int64_t vocab_size = 0, intermediate_size = 0;
  std::int64_t moe_intermediate_size = 0, experts_per_tok = 0, n_experts = 0;  // 0: dense
  std::vector<std::int64_t> layer_window;  // per layer, 0 = full attention
  std::int64_t context_length = 0;         // max_position_embeddings
};

// Reads DIR/config.json (a multimodal config's text_config too) with the defaults mlx-lm and
// models/model_config.cpp use for these fields. Families the models layer does not run yet are
// read the same way, so `inspect` can answer "will it fit" before they are supported.
ModelShape read_model_shape(const std::string& model_dir);

// Tensor bytes of a model folder's safetensors, from the headers alone (index.json shards or
// every model*.safetensors), and the activation dtype's size (that of model.norm.weight, as the
// loader decides it; 2 when absent). Throws bad_input naming the file for a broken header.
struct WeightInfo {
  std::uint64_t bytes = 0;
  std::size_t tensors = 0, shards = 0;
  int activation_bytes = 2;
};
WeightInfo read_weight_info(const std::string& model_dir);

struct PlanRequest {
  std::int64_t ctx = 4096;
  int sequences = 1;    // server: --parallel
  int block_size = 32;  // KV block size as the pool allocates
  std::int64_t prefill_chunk = 512;
  BackendKind backend = BackendKind::kCpu;
};

struct MemoryPlan {
  std::uint64_t weights = 0, kv = 0, activations = 0, logits = 0, headroom = 0;
  std::uint64_t allocations() const { return weights + kv + activations + logits; }
  std::uint64_t total() const { return allocations() + headroom; }
  std::int64_t ctx_allocated = 0;  // ctx rounded up to whole blocks
  std::int64_t kv_blocks = 0;
  std::uint64_t kv_bytes_per_token = 0;  // all layers, K and V
  int sliding_layers = 0;
};

// The KV block bytes and pool size exactly as runtime::KvBlockPool lays them out.
std::uint64_t kv_bytes_per_token(const ModelShape& s, int kv_dtype_bytes);
MemoryPlan plan_memory(const ModelShape& s, const WeightInfo& w, const PlanRequest& r);

// What the device can give. APU: free carve-out plus the usable part of GTT (GTT pages come from
// system RAM, so at most MemAvailable of it); discrete GPU: the device's free memory; CPU:
// MemAvailable. MLXCEL_MEMORY_LIMIT (bytes, or with a K/M/G/T suffix) replaces the figure.
struct MemoryBudget {
  std::uint64_t available = 0;
  std::string device;  // "cpu", "AMD Radeon 8060S (gfx1151, integrated)", ...
  std::string how;     // where the figure comes from, in words
  bool known = true;   // false: a GPU whose memory nothing reports (NVIDIA seen in PCI only)
};
MemoryBudget memory_budget(const Platform& pf, BackendKind backend, int device_index = 0);

// "24G", "512M", "1.5T", "123456" -> bytes (binary units); throws bad_input naming `what`.
std::uint64_t parse_size(const std::string& text, const std::string& what);

struct FitVerdict {
  bool fits = false;
  std::string message;                // one line: fits / does not fit, with the numbers
  std::vector<std::string> warnings;  // GTT smaller than the model, ...
};
FitVerdict check_fit(const MemoryPlan& plan, const MemoryBudget& budget, const Platform& pf,
                     BackendKind backend, int device_index = 0);

nlohmann::json plan_json(const MemoryPlan& plan, const MemoryBudget& b, const FitVerdict& v);
std::string human_bytes(std::uint64_t b);

}  // namespace mlxcel::platform
