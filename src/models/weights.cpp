#include "models/weights.h"

#include "core/error.h"

namespace mlxcel::models {

Tensor MapWeights::get(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) throw_error(ErrorCategory::kBadInput, "missing tensor '" + name + "'");
  return it->second;
}

std::optional<QuantParams> MapWeights::quant_for(const std::string& module) const {
  auto it = quantized.find(module);
  if (it == quantized.end()) return std::nullopt;
  return it->second;
}

}  // namespace mlxcel::models
