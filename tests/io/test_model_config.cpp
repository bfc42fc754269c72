#include <gtest/gtest.h>

#include "core/error.h"
#include "io/model_config.h"

using namespace mlxcel;

namespace {
ModelConfig cfg(const std::string& s) { return ModelConfig::parse(s, "config.json"); }
}  // namespace

TEST(ModelConfig, MlxQuantizationSection) {
  ModelConfig c = cfg(R"({"hidden_size": 64, "quantization": {"group_size": 32, "bits": 4, "mode": "mxfp4",
      "model.layers.0.mlp.gate": {"group_size": 64, "bits": 8},
      "lm_head": {"bits": 6, "group_size": 128, "mode": "affine"},
      "model.layers.1.mlp.gate": {},
      "model.layers.0.self_attn.k_proj": false}})");
  EXPECT_EQ(c.raw()["hidden_size"], 64);
  EXPECT_TRUE(c.quant().present);
  EXPECT_EQ(c.quant().defaults, (QuantParams{QuantMode::kMxfp4, 4, 32}));
  // A per-module dict without "mode" is affine, even under an mxfp4 top level.
  EXPECT_EQ(c.quant_params_for("model.layers.0.mlp.gate", true), (QuantParams{QuantMode::kAffine, 8, 64}));
  EXPECT_EQ(c.quant_params_for("model.layers.1.mlp.gate", true), (QuantParams{QuantMode::kAffine, 4, 64}));
  EXPECT_EQ(c.quant_params_for("lm_head", true), (QuantParams{QuantMode::kAffine, 6, 128}));
  EXPECT_EQ(c.quant_params_for("model.layers.0.self_attn.k_proj", true), std::nullopt);
  // No entry: quantized iff `.scales` exists, with the top level.
  EXPECT_EQ(c.quant_params_for("model.layers.0.self_attn.q_proj", true), (QuantParams{QuantMode::kMxfp4, 4, 32}));
  EXPECT_EQ(c.quant_params_for("model.norm", false), std::nullopt);
}

TEST(ModelConfig, ModeAbsentIsAffineAndCopyInQuantizationConfig) {
  ModelConfig c = cfg(R"({"quantization_config": {"group_size": 64, "bits": 8}})");
  EXPECT_EQ(c.quant().defaults, (QuantParams{QuantMode::kAffine, 8, 64}));
  EXPECT_EQ(cfg(R"({})").quant().present, false);
  EXPECT_EQ(cfg(R"({})").quant_params_for("x", true), std::nullopt);
}

TEST(ModelConfig, InvalidParametersAreRejected) {
  EXPECT_THROW(cfg(R"({"quantization": {"group_size": 64, "bits": 7}})"), Error);
  EXPECT_THROW(cfg(R"({"quantization": {"group_size": 64, "bits": 4, "mode": "int4"}})"), Error);
  EXPECT_THROW(cfg(R"({"quantization": {"group_size": 64, "bits": 4, "x": {"bits": 4, "group_size": 16}}})"), Error);
  EXPECT_THROW(cfg(R"({"quantization": {"group_size": 16, "bits": 4, "mode": "mxfp4"}})"), Error);
  EXPECT_THROW(cfg(R"({"quantization": {"group_size": "64"}})"), Error);
  EXPECT_THROW(cfg(R"([1])"), Error);
  EXPECT_THROW(cfg(R"({bad)"), Error);
}

TEST(ModelConfig, ForeignMappings) {
  EXPECT_EQ(cfg(R"({"quantization_config": {"quant_method": "mxfp4"}})").quant().defaults,
            (QuantParams{QuantMode::kMxfp4, 4, 32}));
  EXPECT_EQ(cfg(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized"}})")
                .quant().defaults,
            (QuantParams{QuantMode::kNvfp4, 4, 16}));
  EXPECT_EQ(cfg(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "pack-quantized"}})")
                .quant().defaults,
            (QuantParams{QuantMode::kAffine, 4, 32}));
  EXPECT_THROW(cfg(R"({"quantization_config": {"quant_method": "compressed-tensors", "format": "float-quantized"}})"),
               Error);
  ModelConfig awq = cfg(R"({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}})");
  EXPECT_EQ(awq.quant().foreign, ForeignQuant::kAwq);
  EXPECT_EQ(awq.quant().defaults, (QuantParams{QuantMode::kAffine, 4, 128}));
  EXPECT_THROW(cfg(R"({"quantization_config": {"quant_method": "gptq", "bits": 8}})"), Error);
  ModelConfig fp8 = cfg(R"({"quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}})");
  EXPECT_EQ(fp8.quant().foreign, ForeignQuant::kFp8Block);
  EXPECT_EQ(fp8.quant().fp8_block.rows, 128);
  EXPECT_EQ(fp8.quant_params_for("x", true), std::nullopt);
  // 2^32 + 128 must not wrap to 128.
  EXPECT_THROW(cfg(R"({"quantization_config": {"quant_method": "fp8", "weight_block_size": [4294967424, 128]}})"), Error);
  EXPECT_EQ(cfg(R"({"quantization_config": {"quant_method": "fp8", "scale_fmt": "ue8m0", "weight_block_size": [32, 32]}})")
                .quant().defaults.mode,
            QuantMode::kMxfp8);
  EXPECT_EQ(cfg(R"({"text_config": {"quantization_config": {"quant_method": "mxfp4"}}})").quant().defaults.mode,
            QuantMode::kMxfp4);
  EXPECT_EQ(ModelConfig::parse("{}", "c", R"({"quantization": {"quant_algo": "NVFP4", "group_size": 16}, "quant_method": "modelopt"})")
                .quant().defaults.mode,
            QuantMode::kNvfp4);
  try {
    cfg(R"({"quantization_config": {"quant_method": "bitnet"}})");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("bitnet"), std::string::npos);
  }
  EXPECT_TRUE(cfg(R"({"quantization": {"group_size": 16, "bits": 4, "mode": "nvfp4"}, "quantize_activations": true})")
                  .quant().quantize_activations);
}
