#pragma once
// config.json: the raw JSON (architecture fields are read by the models layer) plus the
// quantization section, interpreted as mlx-lm 0.32 does (MLX_FORMATS.md §4):
// - `quantization` (or its copy `quantization_config`): top-level group_size / bits / mode
//   (mode absent = affine); every other key is a module path mapping to a dict of
//   to_quantized kwargs (no "mode" = affine, missing bits / group_size = that mode's defaults) or
//   to false.
// - otherwise a foreign `quantization_config` (also lifted from text_config or
//   hf_quant_config.json) is mapped: mxfp4, mxfp8, fp8 with ue8m0 32x32 blocks (mxfp8),
//   compressed-tensors (nvfp4 / mxfp4 / pack-quantized), modelopt NVFP4, awq / gptq (repacked to
//   affine) and HF fine-grained fp8 (block-dequantized, re-quantized to mxfp8 at load).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/fp8_block.h"
#include "quant/quant_params.h"

namespace mlxcel {

enum class ForeignQuant : std::uint8_t {
  kNone = 0,     // MLX-native `quantization` section (or no quantization)
  kMapped = 1,   // a foreign method whose tensors are already MLX layout (mxfp4, nvfp4, ...)
  kAwq = 2,      // AutoAWQ / GPTQ qweight/qzeros/scales, repacked to affine at load
  kFp8Block = 3, // HF fine-grained FP8 (weight_scale_inv)
};

struct QuantConfig {
  bool present = false;           // any weight quantization declared
  std::string source;             // "quantization", "quantization_config (mxfp4)", ...
  QuantParams defaults{};         // top level
  // Per-module entries: a value = quantize with these params, nullopt = `false` (not quantized).
  std::map<std::string, std::optional<QuantParams>> overrides;
  ForeignQuant foreign = ForeignQuant::kNone;
  Fp8Block fp8_block{};                          // kFp8Block
  std::vector<std::string> modules_to_not_convert;  // kFp8Block
  bool quantize_activations = false;             // config["quantize_activations"] (nvfp4/mxfp8 QQLinear)
};

class ModelConfig {
 public:
  // `path` is a model folder (reads DIR/config.json and, if needed, DIR/hf_quant_config.json) or
  // a config.json file.
  static ModelConfig load(const std::string& path);
  // Parses config text; `name` appears in errors. `hf_quant_config` is the optional side file.
  static ModelConfig parse(const std::string& text, const std::string& name,
                           const std::string& hf_quant_config = "");

  const nlohmann::json& raw() const { return raw_; }
  const QuantConfig& quant() const { return quant_; }
  const std::string& name() const { return name_; }

  // mlx-lm's load-time rule: an entry for the path in the quantization map decides (dict ->
  // its params, false -> not quantized); otherwise the module is quantized iff its `.scales`
  // tensor exists, with the top-level parameters (callers cross-check and, like mlx-lm,
  // infer from the tensor shapes when those disagree: see quant_plan.h).
  std::optional<QuantParams> quant_params_for(const std::string& module_path, bool has_scales) const;
  bool has_override(const std::string& module_path) const { return quant_.overrides.count(module_path) != 0; }

 private:
  std::string name_;
  nlohmann::json raw_;
  QuantConfig quant_;
};

}  // namespace mlxcel
