#pragma once
// The shared decoder-only transformer that every supported family is built from. A family file
// (llama.cpp, qwen3.cpp, ...) chooses a DecoderStyle and loads its tensors into DecoderLayers;
// the forward pass here is the same for all of them and is written in ops only.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/linear.h"
#include "models/model.h"
#include "models/rope.h"
#include "ops/step_graphs.h"

namespace mlxcel::models {

struct DecoderStyle {
  bool norm_plus_one = false;   // gemma: RMSNorm weight is (1 + w)
  bool embed_scale = false;     // gemma: embeddings times sqrt(hidden) rounded to bf16
  bool sandwich_norms = false;  // gemma: post-attention / pre- and post-feed-forward norms
  bool qk_norm = false;         // qwen3, gemma3: RMSNorm of q and k per head
  ops::Activation activation = ops::Activation::kSilu;
  float attn_scale = 0.0f;      // 0 -> 1/sqrt(head_dim)
};

struct Moe {
  ops::LinearWeight router;        // [num_experts, hidden]
  ops::LinearWeight gate, up, down;  // stacked experts
  int top_k = 0;
  bool norm_topk_prob = false;
  std::int64_t num_experts = 0;
};

struct DecoderLayer {
  ops::NormWeight input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;
  // Attention: q/k/v, or one qkv (rows q, then k, then v) as phi3 ships it or as stacked at load
  // when the three share a format.
  ops::LinearWeight q, k, v, qkv, o;
  ops::NormWeight q_norm, k_norm;
  ops::Rope rope;
  std::int64_t window = 0;
  // Feed-forward: dense (gate/up, or gate_up: first half gate) or MoE.
  ops::LinearWeight gate, up, gate_up, down;
  std::optional<Moe> moe;
};

class Decoder final : public Model {
 public:
  Decoder(ModelConfig config, DecoderStyle style, ops::Exec exec);
  ops::Act forward_logits(const ops::StepInputs& step, const ops::KvLayout& kv) override;
  std::size_t weight_bytes() const override;
  std::size_t decode_bytes_per_token() const override;
  std::vector<ops::OpSignature> required_ops() const override;
  const ops::Exec& exec() const { return exec_; }
  ops::StepGraphs::Stats graph_stats() const override { return graphs_.stats(); }

  // Stacks q/k/v into qkv and gate/up into gate_up where their formats match (one kernel, one
  // pass over x); called once after loading.
  void fuse_projections();

  DecoderStyle style;
  ops::LinearWeight embed;
  std::optional<ops::LinearWeight> lm_head;  // absent: tied (the embedding table)
  std::vector<DecoderLayer> layers;
  ops::NormWeight final_norm;

 private:
  // Activation buffers of one step, carved from the workspace.
  struct Buffers {
    ops::Act h, xn, tmp, q, k, v, qkv, att, g, u, gu, act, gates, picked, normed, logits;
    std::int32_t* experts = nullptr;
    float* expert_weights = nullptr;
  };
  void plan(std::int64_t T, std::int64_t R, Buffers& b);
  // in_norm null: the input is b.xn and the output goes to b.tmp (the residual add is the
  // caller's). in_norm set (fused): the input norm of b.h runs in the first projection (writing
  // b.xn) and the last projection adds into b.h itself.
  void attention(DecoderLayer& L, int layer, const ops::KvLayout& kv, const ops::StepView& s,
                 Buffers& b, const ops::NormWeight* in_norm);
  void feed_forward(const DecoderLayer& L, int layer, Buffers& b, const ops::NormWeight* in_norm);
  // The ops of one forward step (launches only: recordable by StepGraphs).
  void run_step(const ops::KvLayout& kv, const ops::StepView& s, std::int64_t R, Buffers& b);

  ops::Workspace workspace_;
  ops::StepBlock step_block_;
  ops::StepGraphs graphs_;
};

// Loaders shared by the family files.
Moe load_switch_moe(const ops::Exec& e, const WeightSource& w, const std::string& prefix,
                    const ModelConfig& c);
// The usual names: model.embed_tokens, model.norm, lm_head (unless tied).
void load_embeddings_and_head(Decoder& d, const WeightSource& w);

}  // namespace mlxcel::models
