#pragma once
// The check `generate`, `run` and the server make before loading a model: does this build have
// code for the GPU (else the rebuild command), and does the model fit at this context (else a
// refusal, unless --force). `--estimate-memory` prints the same report and exits.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "platform/memory_plan.h"

namespace mlxcel::platform {

// KV blocks the runtime's pool holds: ceil(ctx / block_size) per sequence. The server sizes its
// pool with this, and plan_memory counts the same blocks.
std::int64_t kv_pool_blocks(std::int64_t ctx, int block_size, int sequences);

// The context a command uses when none is given: the model's, at most `cap`; 4096 when the
// config does not say.
std::int64_t default_ctx(const ModelShape& s, std::int64_t cap);

struct Preflight {
  ModelShape shape;
  WeightInfo weights;
  PlanRequest request;
  MemoryPlan plan;
  MemoryBudget budget;
  FitVerdict verdict;
  std::string report() const;  // the human-readable budget (several lines)
  nlohmann::json json() const;
};

// Plans `request` (ctx already decided) for the model folder `dir` on the device the backend
// would use. Reads config.json and safetensors headers only.
Preflight plan_model(const std::string& dir, const PlanRequest& request, const Platform& pf,
                     int device_index = 0);

// Throws unsupported with the rebuild command when the GPU of `backend` is not covered by this
// build's targets, or out_of_memory with the verdict when the plan does not fit and !force.
// Prints warnings to stderr.
void enforce(const Preflight& p, const Platform& pf, bool force, int device_index = 0);

}  // namespace mlxcel::platform
