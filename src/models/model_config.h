#pragma once
// Architecture settings of the supported model families, read from config.json with mlx-lm's
// field names and per-family defaults (mlx_lm/models/<family>.py ModelArgs). `mistral` is the
// llama family with sliding-window layers, as mlx-lm maps it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxcel::models {

enum class Family : std::uint8_t {
  kLlama = 0,  // llama, mistral
  kQwen2 = 1,
  kQwen3 = 2,
  kQwen3Moe = 3,
  kGemma3Text = 4,
  kPhi3 = 5,
};

const char* family_name(Family f);
// "llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, phi3"
std::string supported_model_types();

// RoPE scaling, as in config.json's rope_scaling (or transformers 5 rope_parameters).
struct RopeScaling {
  std::string type;  // "", "default", "linear", "llama3", "yarn", "longrope", "su"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 0;
  std::vector<double> short_factor, long_factor;  // longrope / su
  double beta_fast = 32.0, beta_slow = 1.0, mscale = 1.0, mscale_all_dim = 0.0;  // yarn
  std::optional<double> attention_factor;
};

struct ModelConfig {
  std::string model_type;
  Family family = Family::kLlama;
  std::int64_t hidden_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t vocab_size = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool rope_traditional = false;
  RopeScaling rope_scaling;
  std::int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = true;
  bool attention_bias = false;  // qwen2: always true on q/k/v
  bool mlp_bias = false;
  // Per layer: attention window in tokens, 0 = full attention.
  std::vector<std::int64_t> layer_window;
  // qwen3_moe
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;
  std::int64_t moe_intermediate_size = 0;
  std::int64_t decoder_sparse_step = 1;
  std::vector<std::int64_t> mlp_only_layers;
  bool norm_topk_prob = false;
  // gemma3_text
  double rope_local_base_freq = 10000.0;
  double query_pre_attn_scalar = 0.0;
  std::int64_t sliding_window_pattern = 0;
  // phi3
  double partial_rotary_factor = 1.0;
  std::int64_t original_max_position_embeddings = 0;
  // End-of-sequence ids from config.json (generation_config.json adds more at load).
  std::vector<std::int32_t> eos_token_ids;
  std::optional<std::int32_t> bos_token_id;

  nlohmann::json raw;

  bool layer_is_moe(std::int64_t layer) const;
  std::int64_t context_length() const { return max_position_embeddings; }
};

// Parses and validates; throws bad_input naming the config file and field, or unsupported with
// the list of supported families for an unknown model_type.
ModelConfig parse_model_config(const nlohmann::json& j, const std::string& source = "config.json");
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace mlxcel::models
