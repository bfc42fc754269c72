// gemma3_text: (1 + w) RMSNorms, embeddings scaled by sqrt(hidden) (rounded to bf16, as
// mlx-lm), q/k norms, sandwich norms around attention and the GELU-tanh MLP, local layers with
// a sliding window and rope_local_base_freq, every sliding_window_pattern-th layer global with
// rope_theta (and its scaling), attention scale query_pre_attn_scalar^-1/2.
#include <cmath>

#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

std::unique_ptr<Decoder> build_gemma3_text(const ModelConfig& c, const WeightSource& w, const ops::Exec& e) {
  DecoderStyle s;
  s.norm_plus_one = true;
  s.embed_scale = true;
  s.sandwich_norms = true;
  s.qk_norm = true;
  s.activation = ops::Activation::kGeluApprox;
  s.attn_scale = static_cast<float>(1.0 / std::sqrt(c.query_pre_attn_scalar));
  auto d = std::make_unique<Decoder>(c, s, e);
  load_embeddings_and_head(*d, w);
  const float eps = static_cast<float>(c.rms_norm_eps);
  const std::int64_t H = c.hidden_size, hd = c.head_dim;
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    DecoderLayer L;
    L.input_norm = load_norm(e, w, p + "input_layernorm.weight", H, eps, true);
    L.post_attn_norm = load_norm(e, w, p + "post_attention_layernorm.weight", H, eps, true);
    L.pre_ff_norm = load_norm(e, w, p + "pre_feedforward_layernorm.weight", H, eps, true);
    L.post_ff_norm = load_norm(e, w, p + "post_feedforward_layernorm.weight", H, eps, true);
    L.q = load_linear(e, w, p + "self_attn.q_proj", H, c.num_attention_heads * hd, false);
    L.k = load_linear(e, w, p + "self_attn.k_proj", H, c.num_key_value_heads * hd, false);
    L.v = load_linear(e, w, p + "self_attn.v_proj", H, c.num_key_value_heads * hd, false);
    L.o = load_linear(e, w, p + "self_attn.o_proj", c.num_attention_heads * hd, H, false);
    L.q_norm = load_norm(e, w, p + "self_attn.q_norm.weight", hd, eps, true);
    L.k_norm = load_norm(e, w, p + "self_attn.k_norm.weight", hd, eps, true);
    L.window = c.layer_window[static_cast<std::size_t>(l)];
    const bool sliding = L.window > 0;
    L.rope = make_rope(e, c, static_cast<int>(hd), sliding ? c.rope_local_base_freq : c.rope_theta,
                       !sliding);
    L.gate = load_linear(e, w, p + "mlp.gate_proj", H, c.intermediate_size, false);
    L.up = load_linear(e, w, p + "mlp.up_proj", H, c.intermediate_size, false);
    L.down = load_linear(e, w, p + "mlp.down_proj", c.intermediate_size, H, false);
    d->layers.push_back(std::move(L));
  }
  return d;
}

}  // namespace mlxcel::models
