#pragma once
// Opens a model folder: config.json (+ generation_config.json for EOS ids), the checkpoint, the
// family's builder. One call for the CLI, the server and the benchmarks.
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "models/checkpoint_weights.h"
#include "models/model.h"
#include "ops/ops.h"

namespace mlxcel::runtime {

struct LoadedModel {
  std::unique_ptr<ops::Backend> backend;  // declared first: outlives the model's device memory
  std::unique_ptr<models::CheckpointWeights> weights;
  std::unique_ptr<models::Model> model;
  std::vector<std::int32_t> eos_ids;  // config.json ∪ generation_config.json
  std::string dir;
};

struct LoadOptions {
  BackendKind backend = BackendKind::kCpu;
  // False: no --device was given; the model then runs on the GPU when this build has a GPU
  // backend and a usable device is present (and --numerics mlx is not asked), else on the CPU.
  bool device_given = false;
  backend::Numerics numerics = backend::Numerics::kFast;
};

// Throws bad_input for a missing folder or file, unsupported for an unknown model_type.
LoadedModel load_model(const std::string& dir, const LoadOptions& options = {});

}  // namespace mlxcel::runtime
