// phi3: fused qkv_proj (rows q, k, v) and gate_up_proj (first half gate), partial rotary
// (partial_rotary_factor), su/longrope scaling with its mscale on the rotated features.
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

std::unique_ptr<Decoder> build_phi3(const ModelConfig& c, const WeightSource& w, const ops::Exec& e) {
  auto d = std::make_unique<Decoder>(c, DecoderStyle{}, e);
  load_embeddings_and_head(*d, w);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::int64_t H = c.hidden_size, hd = c.head_dim;
  const std::int64_t op = (c.num_attention_heads + 2 * c.num_key_value_heads) * hd;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayer L;
    L.input_norm = load_norm(e, w, p + "input_layernorm.weight", H, eps, false);
    L.post_attn_norm = load_norm(e, w, p + "post_attention_layernorm.weight", H, eps, false);
    L.qkv = load_linear(e, w, p + "self_attn.qkv_proj", H, op, false);
    L.o = load_linear(e, w, p + "self_attn.o_proj", c.num_attention_heads * hd, H, false);
    L.rope = make_rope(e, c, static_cast<int>(hd * c.partial_rotary_factor), c.rope_theta, true);
    L.gate_up = load_linear(e, w, p + "mlp.gate_up_proj", H, 2 * c.intermediate_size, false);
    L.down = load_linear(e, w, p + "mlp.down_proj", c.intermediate_size, H, false);
    d->layers.push_back(std::move(L));
  }
  return d;
}

}  // namespace mlxcel::models
