#pragma once
// Where a model's tensors come from. The checkpoint loader (io/) provides the real one; tests use
// MapWeights. `quant_for` applies mlx-lm's load-time rule: the config.json override for the
// module path if any, else quantized iff `<module>.scales` exists, with the top-level params.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "quant/quant_params.h"

namespace mlxcel::models {

class WeightSource {
 public:
  virtual ~WeightSource() = default;
  virtual bool has(const std::string& name) const = 0;
  // Throws bad_input naming the tensor when absent.
  virtual Tensor get(const std::string& name) const = 0;
  virtual std::optional<QuantParams> quant_for(const std::string& module) const = 0;
  virtual std::string describe() const = 0;  // "checkpoint DIR", for error messages
};

class MapWeights final : public WeightSource {
 public:
  std::map<std::string, Tensor> tensors;
  std::map<std::string, QuantParams> quantized;  // module path -> params

  bool has(const std::string& name) const override { return tensors.count(name) != 0; }
  Tensor get(const std::string& name) const override;
  std::optional<QuantParams> quant_for(const std::string& module) const override;
  std::string describe() const override { return "in-memory weights"; }
};

}  // namespace mlxcel::models
