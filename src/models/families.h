#pragma once
// One builder per family (each in its own file: llama.cpp, qwen3.cpp, ...).
#include <memory>

#include "models/decoder.h"

namespace mlxcel::models {
std::unique_ptr<Decoder> build_llama(const ModelConfig& c, const WeightSource& w, const ops::Exec& e);
std::unique_ptr<Decoder> build_qwen2(const ModelConfig& c, const WeightSource& w, const ops::Exec& e);
std::unique_ptr<Decoder> build_qwen3(const ModelConfig& c, const WeightSource& w, const ops::Exec& e);
std::unique_ptr<Decoder> build_qwen3_moe(const ModelConfig& c, const WeightSource& w, const ops::Exec& e);
std::unique_ptr<Decoder> build_gemma3_text(const ModelConfig& c, const WeightSource& w, const ops::Exec& e);
std::unique_ptr<Decoder> build_phi3(const ModelConfig& c, const WeightSource& w, const ops::Exec& e);
// Shared by the llama-like families: standard names, RMSNorm, SwiGLU.
std::unique_ptr<Decoder> build_llama_like(const ModelConfig& c, const WeightSource& w,
                                          const ops::Exec& e, DecoderStyle style, bool qkv_bias,
                                          bool o_bias);
}  // namespace mlxcel::models
