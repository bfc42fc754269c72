// llama (Llama 2/3, SmolLM, mistral): RMSNorm, q/k/v/o attention with optional bias, SwiGLU MLP,
// rope with optional llama3/linear/yarn scaling, sliding-window layers from layer_types.
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

// Shared by the llama-like families: standard names, RMSNorm, SwiGLU.
std::unique_ptr<Decoder> build_llama_like(const ModelConfig& c, const WeightSource& w,
                                          const ops::Exec& e, DecoderStyle style, bool qkv_bias,
                                          bool o_bias) {
  auto d = std::make_unique<Decoder>(c, style, e);
  load_embeddings_and_head(*d, w);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::int64_t H = c.hidden_size, hd = c.head_dim;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayer L;
    L.input_norm = load_norm(e, w, p + "input_layernorm.weight", H, eps, false);
    L.post_attn_norm = load_norm(e, w, p + "post_attention_layernorm.weight", H, eps, false);
    L.q = load_linear(e, w, p + "self_attn.q_proj", H, c.num_attention_heads * hd, qkv_bias);
    L.k = load_linear(e, w, p + "self_attn.k_proj", H, c.num_key_value_heads * hd, qkv_bias);
    L.v = load_linear(e, w, p + "self_attn.v_proj", H, c.num_key_value_heads * hd, qkv_bias);
    L.o = load_linear(e, w, p + "self_attn.o_proj", c.num_attention_heads * hd, H, o_bias);
    if (style.qk_norm) {
      L.q_norm = load_norm(e, w, p + "self_attn.q_norm.weight", hd, eps, false);
      L.k_norm = load_norm(e, w, p + "self_attn.k_norm.weight", hd, eps, false);
    }
    L.rope = make_rope(e, c, static_cast<int>(hd), c.rope_theta, true);
    L.window = c.layer_window[static_cast<std::size_t>(l)];
    if (c.layer_is_moe(l)) {
      L.moe = load_switch_moe(e, w, p + "mlp", c);
    } else {
      L.gate = load_linear(e, w, p + "mlp.gate_proj", H, c.intermediate_size, c.mlp_bias);
      L.up = load_linear(e, w, p + "mlp.up_proj", H, c.intermediate_size, c.mlp_bias);
      L.down = load_linear(e, w, p + "mlp.down_proj", c.intermediate_size, H, c.mlp_bias);
    }
    d->layers.push_back(std::move(L));
  }
  return d;
}

std::unique_ptr<Decoder> build_llama(const ModelConfig& c, const WeightSource& w, const ops::Exec& e) {
  return build_llama_like(c, w, e, DecoderStyle{}, c.attention_bias, c.attention_bias);
}

}  // namespace mlxcel::models
