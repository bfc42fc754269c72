// qwen3: the llama structure with RMSNorm on q and k per head (before RoPE), no biases.
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

std::unique_ptr<Decoder> build_qwen3(const ModelConfig& c, const WeightSource& w, const ops::Exec& e) {
  DecoderStyle s;
  s.qk_norm = true;
  return build_llama_like(c, w, e, s, false, false);
}
}  // namespace mlxcel::models
