#pragma once
// WeightSource over an MLX checkpoint folder: tensors come from the safetensors shards
// (zero-copy mmap views where aligned), quantized modules follow the checkpoint's quantization
// plan (io/quant_plan.h) with the backend's route applied at load (conversions are logged;
// rejected modes throw with the tensor, mode, backend and what to do).
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/device.h"
#include "io/model_config.h"
#include "io/quant_plan.h"
#include "io/safetensors.h"
#include "models/weights.h"

namespace mlxcel::models {

class CheckpointWeights final : public WeightSource {
 public:
  CheckpointWeights(const std::string& dir, BackendKind backend);

  bool has(const std::string& name) const override;
  Tensor get(const std::string& name) const override;
  std::optional<QuantParams> quant_for(const std::string& module) const override;
  std::string describe() const override { return "checkpoint " + dir_; }

  const Checkpoint& checkpoint() const { return ckpt_; }
  const QuantPlan& plan() const { return plan_; }
  const mlxcel::ModelConfig& file_config() const { return cfg_; }

 private:
  const LoadedQuantized& loaded(const QuantizedModule& m) const;

  std::string dir_;
  BackendKind backend_;
  Checkpoint ckpt_;
  mlxcel::ModelConfig cfg_;
  QuantPlan plan_;
  std::map<std::string, const QuantizedModule*> by_path_;
  mutable std::mutex mu_;
  mutable std::map<std::string, LoadedQuantized> cache_;
};

}  // namespace mlxcel::models
