// libFuzzer target: config.json text (quantization sections, foreign mappings) is either parsed
// or refused with an mlxcel::Error; the load rule is then exercised on a few module paths.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const std::string text(reinterpret_cast<const char*>(data), size);
    mlxcel::ModelConfig c = mlxcel::ModelConfig::parse(text, "config.json", text.size() > 64 ? text : "");
    for (const char* p : {"lm_head", "model.layers.0.mlp.gate", "model.embed_tokens"}) {
      (void)c.quant_params_for(p, true);
      (void)c.quant_params_for(p, false);
    }
  } catch (const mlxcel::Error&) {
  }
  return 0;
}
