#include "models/checkpoint_weights.h"

#include "core/error.h"

namespace mlxcel::models {
namespace {
// "a.b.weight" -> ("a.b", "weight")
std::pair<std::string, std::string> split_name(const std::string& name) {
  auto dot = name.rfind('.');
  if (dot == std::string::npos) return {name, ""};
  return {name.substr(0, dot), name.substr(dot + 1)};
}
}  // namespace

CheckpointWeights::CheckpointWeights(const std::string& dir, BackendKind backend)
    : dir_(dir),
      backend_(backend),
      ckpt_(Checkpoint::open(dir)),
      cfg_(mlxcel::ModelConfig::load(dir)),
      plan_(plan_quantization(ckpt_, cfg_)) {
  for (const auto& m : plan_.modules) by_path_[m.path] = &m;
}

const LoadedQuantized& CheckpointWeights::loaded(const QuantizedModule& m) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cache_.find(m.path);
  if (it == cache_.end()) it = cache_.emplace(m.path, load_quantized(ckpt_, m, backend_)).first;
  return it->second;
}

bool CheckpointWeights::has(const std::string& name) const {
  auto [module, leaf] = split_name(name);
  if (by_path_.count(module) && (leaf == "weight" || leaf == "scales" || leaf == "biases"))
    return true;
  return ckpt_.has(name);
}

Tensor CheckpointWeights::get(const std::string& name) const {
  auto [module, leaf] = split_name(name);
  auto q = by_path_.find(module);
  if (q != by_path_.end() && (leaf == "weight" || leaf == "scales" || leaf == "biases")) {
    const auto& l = loaded(*q->second);
    if (leaf == "weight") return l.tensors.weight;
    if (leaf == "scales") return l.tensors.scales;
    if (!l.tensors.biases.defined())
      throw_error(ErrorCategory::kBadInput, describe() + ": module '" + module + "' (" +
                                                l.params.str() + ") has no biases");
    return l.tensors.biases;
  }
  if (!ckpt_.has(name))
    throw_error(ErrorCategory::kBadInput,
                describe() + ": tensor '" + name +
                    "' is missing; the checkpoint does not match its config.json (model_type " +
                    (cfg_.raw().contains("model_type") ? cfg_.raw()["model_type"].dump() : "?") + ")");
  return ckpt_.tensor(name);
}

std::optional<QuantParams> CheckpointWeights::quant_for(const std::string& module) const {
  auto q = by_path_.find(module);
  if (q == by_path_.end()) return std::nullopt;
  return loaded(*q->second).params;
}

}  // namespace mlxcel::models
