#include "models/model.h"

#include <algorithm>

#include "core/error.h"
#include "models/decoder.h"
#include "models/families.h"

namespace mlxcel::models {

std::vector<std::string> Model::missing_ops() const {
  std::vector<std::string> out;
  for (const ops::OpSignature& s : required_ops()) {
    if (exec_.backend().supports(s)) continue;
    const std::string name = s.str();
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

void Model::forward(const ops::StepInputs& step, const ops::KvLayout& kv,
                    std::vector<std::vector<float>>& logits) {
  const ops::Act a = forward_logits(step, kv);
  const std::int64_t V = config_.vocab_size;
  std::vector<float> all(static_cast<std::size_t>(a.rows * V));
  ops::to_host(exec_, a, all.data());
  logits.assign(static_cast<std::size_t>(step.n_seqs), {});
  std::int64_t at = 0;
  for (std::int64_t i = 0; i < step.n_seqs; ++i) {
    const std::int64_t n = step.logit_count[static_cast<std::size_t>(i)];
    logits[i].assign(all.begin() + at * V, all.begin() + (at + n) * V);
    at += n;
  }
}

ops::KvLayout Model::kv_layout(std::int64_t num_blocks, int block_size,
                               std::optional<DType> dtype) const {
  ops::KvLayout k;
  k.n_layers = static_cast<int>(config_.num_hidden_layers);
  k.n_kv_heads = static_cast<int>(config_.num_key_value_heads);
  k.head_dim = static_cast<int>(config_.head_dim);
  k.v_dim = k.head_dim;
  k.dtype = dtype.value_or(activation_dtype());
  k.block_size = block_size;
  k.num_blocks = num_blocks;
  return k;
}

namespace {
std::unique_ptr<Decoder> build_family(const ModelConfig& c, const WeightSource& w,
                                      const ops::Exec& e) {
  switch (c.family) {
    case Family::kLlama: return build_llama(c, w, e);
    case Family::kQwen2: return build_qwen2(c, w, e);
    case Family::kQwen3: return build_qwen3(c, w, e);
    case Family::kQwen3Moe: return build_qwen3_moe(c, w, e);
    case Family::kGemma3Text: return build_gemma3_text(c, w, e);
    case Family::kPhi3: return build_phi3(c, w, e);
  }
  throw_error(ErrorCategory::kUnsupported, "no implementation for this model family");
}
}  // namespace

std::unique_ptr<Model> build_model(const ModelConfig& c, const WeightSource& w, ops::Backend& be) {
  // The checkpoint's activation dtype is that of its (never quantized) final norm weight.
  DType act = w.get("model.norm.weight").dtype();
  if (act != DType::kBF16 && act != DType::kF16) act = DType::kF32;
  auto d = build_family(c, w, ops::Exec(be, act));
  d->fuse_projections();
  return d;
}

}  // namespace mlxcel::models
