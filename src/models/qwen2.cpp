// qwen2 / Qwen2.5: the llama structure with biases on q, k and v (never on o).
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {
std::unique_ptr<Decoder> build_llama_like(const ModelConfig& c, const WeightSource& w,
                                          DecoderStyle style, bool qkv_bias, bool o_bias);

std::unique_ptr<Model> build_qwen2(const ModelConfig& c, const WeightSource& w) {
  return build_llama_like(c, w, DecoderStyle{}, true, false);
}
}  // namespace mlxcel::models
