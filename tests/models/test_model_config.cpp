#include <gtest/gtest.h>

#include "core/error.h"
#include "models/model_config.h"

using namespace mlxcel;
using namespace mlxcel::models;
using json = nlohmann::json;

namespace {
json base(const char* type) {
  return {{"model_type", type},         {"hidden_size", 64},      {"num_hidden_layers", 4},
          {"intermediate_size", 128},   {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"rms_norm_eps", 1e-6},       {"vocab_size", 1000},     {"rope_theta", 10000.0},
          {"max_position_embeddings", 2048}};
}
std::string error_of(const json& j) {
  try {
    parse_model_config(j);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(ModelConfig, LlamaDefaultsAndRopeScaling) {
  json j = base("llama");
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto c = parse_model_config(j);
  EXPECT_EQ(c.family, Family::kLlama);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
}

TEST(ModelConfig, MistralSlidingLayersFromLayerTypes) {
  json j = base("mistral");
  j["sliding_window"] = 32;
  j["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention", "full_attention"};
  auto c = parse_model_config(j);
  EXPECT_EQ(c.layer_window, (std::vector<std::int64_t>{32, 0, 32, 0}));
}

TEST(ModelConfig, GemmaPatternAndMoeLayers) {
  json g = base("gemma3_text");
  g["sliding_window"] = 16;
  g["sliding_window_pattern"] = 2;
  auto c = parse_model_config(g);
  EXPECT_EQ(c.layer_window, (std::vector<std::int64_t>{16, 0, 16, 0}));
  EXPECT_TRUE(c.tie_word_embeddings);

  json m = base("qwen3_moe");
  m.update({{"head_dim", 16}, {"num_experts", 8}, {"num_experts_per_tok", 2},
            {"moe_intermediate_size", 32}, {"decoder_sparse_step", 2}, {"mlp_only_layers", {3}},
            {"norm_topk_prob", true}, {"tie_word_embeddings", false}});
  auto q = parse_model_config(m);
  EXPECT_FALSE(q.layer_is_moe(0));
  EXPECT_TRUE(q.layer_is_moe(1));
  EXPECT_FALSE(q.layer_is_moe(3));  // listed in mlp_only_layers
}

TEST(ModelConfig, ClearErrors) {
  EXPECT_NE(error_of(base("mamba")).find("supported families: llama, mistral"), std::string::npos);
  json j = base("llama");
  j.erase("hidden_size");
  EXPECT_NE(error_of(j).find("'hidden_size' is missing"), std::string::npos);
  j = base("llama");
  j["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(j).find("num_key_value_heads"), std::string::npos);
  j = base("qwen3");
  j.erase("rope_theta");
  EXPECT_NE(error_of(j).find("rope_theta"), std::string::npos);
  j = base("llama");
  j["vocab_size"] = "big";
  EXPECT_NE(error_of(j).find("'vocab_size' must be an integer"), std::string::npos);
}
