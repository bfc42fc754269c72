#include "models/model.h"

#include "core/error.h"
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

KvCacheConfig Model::kv_config(std::int64_t num_blocks, int block_size,
                               std::optional<DType> dtype) const {
  KvCacheConfig k;
  k.n_layers = static_cast<int>(config_.num_hidden_layers);
  k.n_kv_heads = static_cast<int>(config_.num_key_value_heads);
  k.head_dim = static_cast<int>(config_.head_dim);
  k.dtype = dtype.value_or(activation_dtype());
  k.block_size = block_size;
  k.num_blocks = num_blocks;
  return k;
}

const char* numerics_name(Numerics n) { return n == Numerics::kMlx ? "mlx" : "fast"; }

namespace {
std::unique_ptr<Model> build_family(const ModelConfig& c, const WeightSource& w) {
  switch (c.family) {
    case Family::kLlama: return build_llama(c, w);
    case Family::kQwen2: return build_qwen2(c, w);
    case Family::kQwen3: return build_qwen3(c, w);
    case Family::kQwen3Moe: return build_qwen3_moe(c, w);
    case Family::kGemma3Text: return build_gemma3_text(c, w);
    case Family::kPhi3: return build_phi3(c, w);
  }
  throw_error(ErrorCategory::kUnsupported, "no implementation for this model family");
}
}  // namespace

std::unique_ptr<Model> build_model(const ModelConfig& c, const WeightSource& w) {
  auto m = build_family(c, w);
  if (auto* d = dynamic_cast<Decoder*>(m.get())) {
    // The checkpoint's activation dtype is that of its (never quantized) final norm weight.
    DType act = w.get("model.norm.weight").dtype();
    if (act != DType::kBF16 && act != DType::kF16) act = DType::kF32;
    d->act_dtype = act;
    d->final_norm.act = act;
    for (auto& L : d->layers)
      for (Norm* n : {&L.input_norm, &L.post_attn_norm, &L.pre_ff_norm, &L.post_ff_norm, &L.q_norm, &L.k_norm})
        n->act = act;
  }
  return m;
}

}  // namespace mlxcel::models
