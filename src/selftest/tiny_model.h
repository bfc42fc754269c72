#pragma once
// Tiny random models built in memory for every family (config.json as a JSON object, bf16 weights,
// optionally affine 4-bit), shared by the engine tests and `mlxcel selftest`.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"
#include "models/model_config.h"
#include "quant/quantize.h"

namespace mlxcel::testing_models {

using namespace mlxcel::models;
using json = nlohmann::json;

struct Tiny {
  ModelConfig cfg;
  MapWeights w;
};

inline void add(MapWeights& w, std::mt19937& rng, const std::string& name, Shape shape, float scale,
         DType dt = DType::kBF16) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  w.tensors[name] = Tensor::from_f32(v, shape, dt);
}

inline void add_linear(MapWeights& w, std::mt19937& rng, const std::string& m, std::int64_t in,
                std::int64_t out, bool quantize, bool bias = false) {
  add(w, rng, m + ".weight", {out, in}, 1.0f / std::sqrt(static_cast<float>(in)));
  if (quantize) {
    QuantParams p{QuantMode::kAffine, 4, 32};
    auto q = mlxcel::quantize(w.tensors[m + ".weight"], p);
    w.tensors[m + ".weight"] = q.weight;
    w.tensors[m + ".scales"] = q.scales;
    w.tensors[m + ".biases"] = q.biases;
    w.quantized[m] = p;
  }
  if (bias) add(w, rng, m + ".bias", {out}, 0.1f);
}

inline Tiny make(const char* type, bool quantize) {
  Tiny t;
  json j = {{"model_type", type},       {"hidden_size", 64},       {"num_hidden_layers", 2},
            {"intermediate_size", 96},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"head_dim", 16},           {"rms_norm_eps", 1e-5},    {"vocab_size", 128},
            {"rope_theta", 10000.0},    {"max_position_embeddings", 512},
            {"tie_word_embeddings", std::string(type) != "phi3"}};
  if (std::string(type) == "qwen3_moe")
    j.update({{"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
              {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array({1})},
              {"norm_topk_prob", true}});
  if (std::string(type) == "gemma3_text")
    j.update({{"sliding_window", 4}, {"sliding_window_pattern", 2}, {"query_pre_attn_scalar", 16}});
  if (std::string(type) == "mistral")
    j.update({{"sliding_window", 3}, {"layer_types", {"sliding_attention", "full_attention"}}});
  if (std::string(type) == "phi3") j.update({{"partial_rotary_factor", 0.5}});
  t.cfg = parse_model_config(j);
  const auto& c = t.cfg;
  std::mt19937 rng(5);
  const std::int64_t H = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  add(t.w, rng, "model.embed_tokens.weight", {c.vocab_size, H}, 1.0f);
  add(t.w, rng, "model.norm.weight", {H}, 0.1f);
  if (!c.tie_word_embeddings) add_linear(t.w, rng, "lm_head", H, c.vocab_size, quantize);
  const bool gemma = c.family == Family::kGemma3Text;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm"}) add(t.w, rng, p + n + ".weight", {H}, 0.1f);
    if (gemma)
      for (const char* n : {"pre_feedforward_layernorm", "post_feedforward_layernorm"}) add(t.w, rng, p + n + ".weight", {H}, 0.1f);
    if (c.family == Family::kPhi3) {
      add_linear(t.w, rng, p + "self_attn.qkv_proj", H, (4 + 2 * 2) * hd, quantize);
      add_linear(t.w, rng, p + "mlp.gate_up_proj", H, 2 * I, quantize);
    } else {
      bool b = c.family == Family::kQwen2;
      add_linear(t.w, rng, p + "self_attn.q_proj", H, 4 * hd, quantize, b);
      add_linear(t.w, rng, p + "self_attn.k_proj", H, 2 * hd, quantize, b);
      add_linear(t.w, rng, p + "self_attn.v_proj", H, 2 * hd, quantize, b);
      if (c.family == Family::kQwen3 || c.family == Family::kQwen3Moe || gemma) {
        add(t.w, rng, p + "self_attn.q_norm.weight", {hd}, 0.1f);
        add(t.w, rng, p + "self_attn.k_norm.weight", {hd}, 0.1f);
      }
      if (c.layer_is_moe(l)) {
        add_linear(t.w, rng, p + "mlp.gate", H, 4, quantize);
        for (const char* proj : {"gate_proj", "up_proj"})
          add(t.w, rng, p + "mlp.switch_mlp." + proj + ".weight", {4, 32, H}, 0.125f);
        add(t.w, rng, p + "mlp.switch_mlp.down_proj.weight", {4, H, 32}, 0.18f);
      } else {
        add_linear(t.w, rng, p + "mlp.gate_proj", H, I, quantize);
        add_linear(t.w, rng, p + "mlp.up_proj", H, I, quantize);
      }
    }
    add_linear(t.w, rng, p + "self_attn.o_proj", 4 * hd, H, quantize);
    if (!c.layer_is_moe(l)) add_linear(t.w, rng, p + "mlp.down_proj", I, H, quantize);
  }
  return t;
}

inline std::vector<std::int32_t> prompt(int n, int seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> p(n);
  for (auto& x : p) x = static_cast<std::int32_t>(rng() % 128);
  return p;
}

}  // namespace mlxcel::testing_models
