// Engine invariants on tiny random models built in memory, for every family and both numerics:
// decoding token by token through the paged KV cache gives the same logits as one prefill; a
// batch of sequences gives each the logits it gets alone; prefix reuse gives the logits of a full
// recompute. Bit for bit: the CPU kernels are row-stable (one reduction order per output whatever
// the number of rows, the tile or the thread split).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "models/decoder.h"
#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/step.h"
#include "quant/quantize.h"

using namespace mlxcel;
using namespace mlxcel::models;
using namespace mlxcel::runtime;
using json = nlohmann::json;

namespace {

struct Tiny {
  ModelConfig cfg;
  MapWeights w;
};

void add(MapWeights& w, std::mt19937& rng, const std::string& name, Shape shape, float scale,
         DType dt = DType::kBF16) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  w.tensors[name] = Tensor::from_f32(v, shape, dt);
}

void add_linear(MapWeights& w, std::mt19937& rng, const std::string& m, std::int64_t in,
                std::int64_t out, bool quantize, bool bias = false) {
  add(w, rng, m + ".weight", {out, in}, 1.0f / std::sqrt(static_cast<float>(in)));
  if (quantize) {
    QuantParams p{QuantMode::kAffine, 4, 32};
    auto q = mlxcel::quantize(w.tensors[m + ".weight"], p);
    w.tensors[m + ".weight"] = q.weight;
    w.tensors[m + ".scales"] = q.scales;
    w.tensors[m + ".biases"] = q.biases;
    w.quantized[m] = p;
  }
  if (bias) add(w, rng, m + ".bias", {out}, 0.1f);
}

Tiny make(const char* type, bool quantize) {
  Tiny t;
  json j = {{"model_type", type},       {"hidden_size", 64},       {"num_hidden_layers", 2},
            {"intermediate_size", 96},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
            {"head_dim", 16},           {"rms_norm_eps", 1e-5},    {"vocab_size", 128},
            {"rope_theta", 10000.0},    {"max_position_embeddings", 512},
            {"tie_word_embeddings", std::string(type) != "phi3"}};
  if (std::string(type) == "qwen3_moe")
    j.update({{"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 32},
              {"decoder_sparse_step", 1}, {"mlp_only_layers", json::array({1})},
              {"norm_topk_prob", true}});
  if (std::string(type) == "gemma3_text")
    j.update({{"sliding_window", 4}, {"sliding_window_pattern", 2}, {"query_pre_attn_scalar", 16}});
  if (std::string(type) == "mistral")
    j.update({{"sliding_window", 3}, {"layer_types", {"sliding_attention", "full_attention"}}});
  if (std::string(type) == "phi3") j.update({{"partial_rotary_factor", 0.5}});
  t.cfg = parse_model_config(j);
  const auto& c = t.cfg;
  std::mt19937 rng(5);
  const std::int64_t H = c.hidden_size, hd = c.head_dim, I = c.intermediate_size;
  add(t.w, rng, "model.embed_tokens.weight", {c.vocab_size, H}, 1.0f);
  add(t.w, rng, "model.norm.weight", {H}, 0.1f);
  if (!c.tie_word_embeddings) add_linear(t.w, rng, "lm_head", H, c.vocab_size, quantize);
  const bool gemma = c.family == Family::kGemma3Text;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm"}) add(t.w, rng, p + n + ".weight", {H}, 0.1f);
    if (gemma)
      for (const char* n : {"pre_feedforward_layernorm", "post_feedforward_layernorm"}) add(t.w, rng, p + n + ".weight", {H}, 0.1f);
    if (c.family == Family::kPhi3) {
      add_linear(t.w, rng, p + "self_attn.qkv_proj", H, (4 + 2 * 2) * hd, quantize);
      add_linear(t.w, rng, p + "mlp.gate_up_proj", H, 2 * I, quantize);
    } else {
      bool b = c.family == Family::kQwen2;
      add_linear(t.w, rng, p + "self_attn.q_proj", H, 4 * hd, quantize, b);
      add_linear(t.w, rng, p + "self_attn.k_proj", H, 2 * hd, quantize, b);
      add_linear(t.w, rng, p + "self_attn.v_proj", H, 2 * hd, quantize, b);
      if (c.family == Family::kQwen3 || c.family == Family::kQwen3Moe || gemma) {
        add(t.w, rng, p + "self_attn.q_norm.weight", {hd}, 0.1f);
        add(t.w, rng, p + "self_attn.k_norm.weight", {hd}, 0.1f);
      }
      if (c.layer_is_moe(l)) {
        add_linear(t.w, rng, p + "mlp.gate", H, 4, quantize);
        for (const char* proj : {"gate_proj", "up_proj"})
          add(t.w, rng, p + "mlp.switch_mlp." + proj + ".weight", {4, 32, H}, 0.125f);
        add(t.w, rng, p + "mlp.switch_mlp.down_proj.weight", {4, H, 32}, 0.18f);
      } else {
        add_linear(t.w, rng, p + "mlp.gate_proj", H, I, quantize);
        add_linear(t.w, rng, p + "mlp.up_proj", H, I, quantize);
      }
    }
    add_linear(t.w, rng, p + "self_attn.o_proj", 4 * hd, H, quantize);
    if (!c.layer_is_moe(l)) add_linear(t.w, rng, p + "mlp.down_proj", I, H, quantize);
  }
  return t;
}

std::vector<std::int32_t> prompt(int n, int seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> p(n);
  for (auto& x : p) x = static_cast<std::int32_t>(rng() % 128);
  return p;
}

// Index of the first logit whose bits differ, or -1.
long first_difference(const std::vector<float>& a, const float* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<long>(i);
  return -1;
}

class DecoderConsistency
    : public ::testing::TestWithParam<std::tuple<const char*, bool, backend::Numerics>> {};

}  // namespace

TEST_P(DecoderConsistency, IncrementalBatchedAndPrefixReuseAgree) {
  auto [type, quantize, numerics] = GetParam();
  Tiny t = make(type, quantize);
  cpu::CpuBackend be(numerics);
  auto model = build_model(t.cfg, t.w, be);
  KvBlockPool pool(model->kv_layout(64, 4), &be);
  const int V = static_cast<int>(t.cfg.vocab_size);
  auto p = prompt(11, 1);

  // One prefill with every row's logits.
  SequenceKv full(pool);
  std::vector<std::vector<float>> out;
  std::vector<BatchItem> b = {{&full, p, true}};
  forward_step(*model, b, out);
  std::vector<float> ref = out[0];
  for (float x : ref) ASSERT_TRUE(std::isfinite(x));

  // Token by token.
  SequenceKv inc(pool);
  for (std::size_t i = 0; i < p.size(); ++i) {
    std::vector<BatchItem> one = {{&inc, std::span<const std::int32_t>(&p[i], 1), false}};
    forward_step(*model, one, out);
    EXPECT_EQ(first_difference(out[0], ref.data() + i * V, V), -1) << type << " position " << i;
  }

  // Two sequences in one batch: a decode step of `inc` beside a prefill of another prompt.
  auto p2 = prompt(7, 2);
  SequenceKv alone(pool);
  std::vector<BatchItem> a = {{&alone, p2, false}};
  forward_step(*model, a, out);
  std::vector<float> alone_logits = out[0];
  SequenceKv other(pool), inc_copy(pool);
  std::vector<BatchItem> pre = {{&inc_copy, p, false}};
  forward_step(*model, pre, out);
  std::int32_t next = 3;
  std::vector<BatchItem> mixed = {{&inc_copy, std::span<const std::int32_t>(&next, 1), false},
                                  {&other, p2, false}};
  forward_step(*model, mixed, out);
  EXPECT_EQ(first_difference(out[1], alone_logits.data(), V), -1) << type << " batched";

  // Prefix reuse: a sequence that starts with the cached 8-token prefix of `full`.
  auto p3 = p;
  p3.push_back(9);
  SequenceKv reuse(pool);
  EXPECT_EQ(reuse.reuse_prefix(p3), 8);
  std::vector<BatchItem> rest = {{&reuse, std::span<const std::int32_t>(p3).subspan(8), false}};
  forward_step(*model, rest, out);
  SequenceKv fresh(pool);
  std::vector<BatchItem> f = {{&fresh, p3, false}};
  std::vector<std::vector<float>> out2;
  forward_step(*model, f, out2);
  EXPECT_EQ(first_difference(out[0], out2[0].data(), V), -1) << type << " prefix reuse";
}

INSTANTIATE_TEST_SUITE_P(
    Families, DecoderConsistency,
    ::testing::Combine(::testing::Values("llama", "mistral", "qwen2", "qwen3", "qwen3_moe",
                                         "gemma3_text", "phi3"),
                       ::testing::Bool(),
                       ::testing::Values(backend::Numerics::kFast, backend::Numerics::kMlx)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_q4" : "_bf16") +
             "_" + backend::numerics_name(std::get<2>(info.param));
    });
