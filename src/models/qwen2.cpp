// qwen2 / Qwen2.5: the llama structure with biases on q, k and v (never on o).
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

std::unique_ptr<Decoder> build_qwen2(const ModelConfig& c, const WeightSource& w, const ops::Exec& e) {
  return build_llama_like(c, w, e, DecoderStyle{}, true, false);
}
}  // namespace mlxcel::models
