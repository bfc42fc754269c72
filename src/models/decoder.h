#pragma once
// The shared decoder-only transformer that every supported family is built from. A family file
// (llama.cpp, qwen3.cpp, ...) chooses a DecoderStyle and loads its tensors into DecoderLayers;
// the forward pass here is the same for all of them.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/linear.h"
#include "models/model.h"
#include "models/rope.h"

namespace mlxcel::models {

enum class Activation : std::uint8_t { kSilu = 0, kGeluApprox = 1 };

struct DecoderStyle {
  bool norm_plus_one = false;   // gemma: RMSNorm weight is (1 + w)
  bool embed_scale = false;     // gemma: embeddings times sqrt(hidden) rounded to bf16
  bool sandwich_norms = false;  // gemma: post-attention / pre- and post-feed-forward norms
  bool qk_norm = false;         // qwen3, gemma3: RMSNorm of q and k per head
  Activation activation = Activation::kSilu;
  float attn_scale = 0.0f;      // 0 -> 1/sqrt(head_dim)
};

struct Norm {
  std::vector<float> weight;
  float eps = 1e-5f;
  // With act == BF16/F16, rounds as mx.fast.rms_norm does for half inputs:
  // y = round(round(x * rsqrt(mean(x^2) + eps)) * w).
  DType act = DType::kF32;
  void apply(const float* x, std::int64_t rows, std::int64_t cols, float* y,
             Numerics numerics = Numerics::kFast) const;
};

struct Moe {
  Linear router;  // [num_experts, hidden]
  std::vector<Linear> gate, up, down;  // per expert
  int top_k = 0;
  bool norm_topk_prob = false;
};

struct DecoderLayer {
  Norm input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;
  // Attention: either q/k/v or one fused qkv (phi3: rows q, then k, then v).
  Linear q, k, v, qkv, o;
  Norm q_norm, k_norm;
  cpu::RopePlan rope;
  std::int64_t window = 0;
  // Feed-forward: dense (gate/up or fused gate_up: first half gate) or MoE.
  Linear gate, up, gate_up, down;
  std::optional<Moe> moe;
};

class Decoder final : public Model {
 public:
  Decoder(ModelConfig config, DecoderStyle style);
  void forward(std::span<BatchItem> batch, std::vector<std::vector<float>>& logits) override;
  std::size_t weight_bytes() const override;
  std::size_t decode_bytes_per_token() const override;
  DType activation_dtype() const override { return act_dtype; }

  DecoderStyle style;
  Linear embed;
  std::optional<Linear> lm_head;  // absent: tied (embed.as_linear)
  std::vector<DecoderLayer> layers;
  Norm final_norm;

 private:
  void attention(DecoderLayer& L, int layer, std::span<BatchItem> batch,
                 const std::vector<std::int64_t>& pos, const std::vector<int>& item_of,
                 const float* xn, std::int64_t T, float* out);
  void feed_forward(const DecoderLayer& L, int layer, const float* xn, std::int64_t T, float* out);
  // g = act(g) * u, rounded as the numerics mode says.
  void gated_activation(Activation a, float* g, const float* u, std::int64_t n) const;
  void emit(const char* name, int layer, const float* data, std::int64_t rows,
            std::int64_t cols) const;
  void moe_forward(const Moe& m, const float* xn, std::int64_t T, float* out);

  DType kv_dtype_ = DType::kF32;
  // Per batch item of the current step: key positions in mlx-lm's rotating-cache order (mlx
  // numerics, single-token steps of sliding-window models), else empty.
  std::vector<std::vector<std::int64_t>> window_keys_;

 public:
  // Activation dtype of the checkpoint (its embedding / scales dtype). For BF16/F16 the forward
  // rounds activations where MLX materializes them in that dtype (each op's output), so greedy
  // decoding follows mlx-lm's through near-ties too; math inside each op stays fp32.
  DType act_dtype = DType::kF32;
  void round_act(float* x, std::int64_t n) const;
};

// Loaders shared by the family files.
Norm load_norm(const WeightSource& w, const std::string& name, std::int64_t dim, float eps,
               bool plus_one);
Moe load_switch_moe(const WeightSource& w, const std::string& prefix, const ModelConfig& c);
// The usual names: model.embed_tokens, model.norm, lm_head (unless tied).
void load_embeddings_and_head(Decoder& d, const WeightSource& w);

}  // namespace mlxcel::models
