// qwen3_moe: qwen3 attention; sparse layers route each token to num_experts_per_tok of
// num_experts SwiGLU experts (stacked as switch_mlp.*), weighted by the router's softmax
// (renormalized over the chosen experts when norm_topk_prob); mlp_only_layers and
// decoder_sparse_step select dense layers.
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

std::unique_ptr<Decoder> build_qwen3_moe(const ModelConfig& c, const WeightSource& w, const ops::Exec& e) {
  DecoderStyle s;
  s.qk_norm = true;
  return build_llama_like(c, w, e, s, false, false);
}
}  // namespace mlxcel::models
