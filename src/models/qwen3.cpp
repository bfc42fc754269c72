// qwen3: the llama structure with RMSNorm on q and k per head (before RoPE), no biases.
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {
std::unique_ptr<Decoder> build_llama_like(const ModelConfig& c, const WeightSource& w,
                                          DecoderStyle style, bool qkv_bias, bool o_bias);

std::unique_ptr<Model> build_qwen3(const ModelConfig& c, const WeightSource& w) {
  DecoderStyle s;
  s.qk_norm = true;
  return build_llama_like(c, w, s, false, false);
}
}  // namespace mlxcel::models
