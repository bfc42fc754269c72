#pragma once
// One builder per family (each in its own file: llama.cpp, qwen2.cpp, ...).
#include <memory>

#include "models/model.h"

namespace mlxcel::models {
std::unique_ptr<Model> build_llama(const ModelConfig& c, const WeightSource& w);
std::unique_ptr<Model> build_qwen2(const ModelConfig& c, const WeightSource& w);
std::unique_ptr<Model> build_qwen3(const ModelConfig& c, const WeightSource& w);
std::unique_ptr<Model> build_qwen3_moe(const ModelConfig& c, const WeightSource& w);
std::unique_ptr<Model> build_gemma3_text(const ModelConfig& c, const WeightSource& w);
std::unique_ptr<Model> build_phi3(const ModelConfig& c, const WeightSource& w);
}  // namespace mlxcel::models
