#pragma once
// Opens a model folder: config.json (+ generation_config.json for EOS ids), the checkpoint, the
// family's builder. One call for the CLI, the server and the benchmarks.
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "models/checkpoint_weights.h"
#include "models/model.h"

namespace mlxcel::models {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<CheckpointWeights> weights;
  std::vector<std::int32_t> eos_ids;  // config.json ∪ generation_config.json
  std::string dir;
};

struct LoadOptions {
  BackendKind backend = BackendKind::kCpu;
  Numerics numerics = Numerics::kFast;
};

// Throws bad_input for a missing folder or file, unsupported for an unknown model_type.
LoadedModel load_model(const std::string& dir, const LoadOptions& options = {});

}  // namespace mlxcel::models
