#include "models/decoder.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mlxcel::models {

namespace {
// Steps of up to this many tokens take the fused form (decode and short prefills): the decode
// GEMVs' row limit on the GPU, above which prefill's GEMM runs.
constexpr std::int64_t kFusedMaxTokens = 64;
}  // namespace

Moe load_switch_moe(const ops::Exec& e, const WeightSource& w, const std::string& prefix,
                    const ModelConfig& c) {
  Moe m;
  m.top_k = static_cast<int>(c.num_experts_per_tok);
  m.norm_topk_prob = c.norm_topk_prob;
  m.num_experts = c.num_experts;
  m.router = load_linear(e, w, prefix + ".gate", c.hidden_size, c.num_experts, false);
  const std::int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  const std::string s = prefix + ".switch_mlp.";
  m.gate = load_stacked(e, w, s + "gate_proj", E, H, I);
  m.up = load_stacked(e, w, s + "up_proj", E, H, I);
  m.down = load_stacked(e, w, s + "down_proj", E, I, H);
  return m;
}

void load_embeddings_and_head(Decoder& d, const WeightSource& w) {
  const ModelConfig& c = d.config();
  const ops::Exec& e = d.exec();
  d.embed = load_linear(e, w, "model.embed_tokens", c.hidden_size, c.vocab_size, false);
  d.final_norm = load_norm(e, w, "model.norm.weight", c.hidden_size,
                           static_cast<float>(c.rms_norm_eps), d.style.norm_plus_one);
  if (!c.tie_word_embeddings || (c.family == Family::kGemma3Text && w.has("lm_head.weight")))
    d.lm_head = load_linear(e, w, "lm_head", c.hidden_size, c.vocab_size, false);
}

Decoder::Decoder(ModelConfig config, DecoderStyle s, ops::Exec exec)
    : Model(std::move(config), std::move(exec)), style(s) {}

void Decoder::fuse_projections() {
  ops::Backend& be = exec_.backend();
  for (auto& L : layers) {
    if (!L.qkv.defined() && L.q.defined()) {
      const ops::LinearWeight* parts[] = {&L.q, &L.k, &L.v};
      if (auto f = ops::LinearWeight::concat(be, L.q.name() + "+k+v", parts)) {
        L.qkv = std::move(*f);
        L.q = L.k = L.v = ops::LinearWeight();
      }
    }
    if (!L.gate_up.defined() && L.gate.defined()) {
      const ops::LinearWeight* parts[] = {&L.gate, &L.up};
      if (auto f = ops::LinearWeight::concat(be, L.gate.name() + "+up", parts)) {
        L.gate_up = std::move(*f);
        L.gate = L.up = ops::LinearWeight();
      }
    }
  }
}

std::size_t Decoder::weight_bytes() const {
  std::size_t b = embed.weight_bytes() + (lm_head ? lm_head->weight_bytes() : 0);
  for (const auto& L : layers) {
    for (const ops::LinearWeight* l : {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate, &L.up, &L.gate_up, &L.down})
      b += l->weight_bytes();
    if (L.moe)
      for (const auto* l : {&L.moe->router, &L.moe->gate, &L.moe->up, &L.moe->down}) b += l->weight_bytes();
  }
  return b;
}

std::size_t Decoder::decode_bytes_per_token() const {
  std::size_t b = lm_head ? lm_head->weight_bytes() + embed.weight_bytes() / static_cast<std::size_t>(embed.out())
                          : embed.weight_bytes();
  for (const auto& L : layers) {
    for (const ops::LinearWeight* l : {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate, &L.up, &L.gate_up, &L.down})
      b += l->weight_bytes();
    if (L.moe) {
      b += L.moe->router.weight_bytes();
      const std::size_t experts = L.moe->gate.weight_bytes() + L.moe->up.weight_bytes() + L.moe->down.weight_bytes();
      b += experts * static_cast<std::size_t>(L.moe->top_k) /
           std::max<std::size_t>(1, static_cast<std::size_t>(L.moe->num_experts));
    }
  }
  return b;
}

void Decoder::plan(std::int64_t T, std::int64_t R, Buffers& b) {
  const ModelConfig& c = config_;
  const DType st = exec_.storage();
  const std::int64_t D = c.hidden_size, hd = c.head_dim;
  const std::int64_t qn = c.num_attention_heads * hd, kn = c.num_key_value_heads * hd;
  std::int64_t I = 0, E = 0, K = 0;
  for (const auto& L : layers) {
    I = std::max(I, L.down.in());
    if (L.moe) {
      E = std::max(E, L.moe->num_experts);
      K = std::max<std::int64_t>(K, L.moe->top_k);
    }
  }
  ops::Workspace& w = workspace_;
  for (;;) {
    w.begin();
    b.h = w.carve(st, T, D);
    b.xn = w.carve(st, T, D);
    b.tmp = w.carve(st, T, D);
    b.qkv = w.carve(st, T, qn + 2 * kn);
    b.q = w.carve(st, T, qn);
    b.k = w.carve(st, T, kn);
    b.v = w.carve(st, T, kn);
    b.att = w.carve(st, T, qn);
    if (I > 0) {
      b.gu = w.carve(st, T, 2 * I);
      b.g = w.carve(st, T, I);
      b.u = w.carve(st, T, I);
      b.act = w.carve(st, T, I);
    }
    if (E > 0) {
      b.gates = w.carve(st, T, E);
      b.experts = static_cast<std::int32_t*>(w.carve_bytes(static_cast<std::size_t>(T * K) * sizeof(std::int32_t)));
      b.expert_weights = static_cast<float*>(w.carve_bytes(static_cast<std::size_t>(T * K) * sizeof(float)));
    }
    b.picked = w.carve(st, R, D);
    b.normed = w.carve(st, R, D);
    b.logits = w.carve(st, R, c.vocab_size);
    if (w.fits()) return;
    w.commit(exec_.backend());
  }
}

void Decoder::attention(DecoderLayer& L, int layer, const ops::KvLayout& kv,
                        const ops::StepView& s, Buffers& b, const ops::NormWeight* in_norm) {
  const ModelConfig& c = config_;
  const ops::Exec& e = exec_;
  const int Hq = static_cast<int>(c.num_attention_heads), Hk = static_cast<int>(c.num_key_value_heads);
  const int hd = static_cast<int>(c.head_dim);
  const std::int64_t qn = static_cast<std::int64_t>(Hq) * hd, kn = static_cast<std::int64_t>(Hk) * hd;
  ops::Act q = b.q, k = b.k, v = b.v;
  // The first projection (normalizing b.h into b.xn first when fused); the others read b.xn.
  auto project = [&](const ops::LinearWeight& w, ops::Act y) {
    if (in_norm) {
      ops::norm_linear(e, *in_norm, b.h, b.xn, w, y);
      e.emit("attn_norm", layer, b.xn);
      in_norm = nullptr;
    } else {
      ops::linear(e, w, b.xn, y);
    }
  };
  const bool fused = in_norm != nullptr;
  if (L.qkv.defined()) {
    project(L.qkv, b.qkv);
    q = b.qkv.sub(0, qn);
    k = b.qkv.sub(qn, kn);
    v = b.qkv.sub(qn + kn, kn);
  } else {
    project(L.q, q);
    project(L.k, k);
    project(L.v, v);
  }
  e.emit("q", layer, q);
  e.emit("k", layer, k);
  e.emit("v", layer, v);
  // qk-norm (when the family has it), RoPE at each token's absolute position, then K/V appended
  // at the token's slot: one op.
  ops::rope_kv_append(e, q, k, v, Hq, Hk, hd, L.rope, kv, layer, s,
                      style.qk_norm ? &L.q_norm : nullptr, style.qk_norm ? &L.k_norm : nullptr);
  e.emit("q_rope", layer, q);
  e.emit("k_rope", layer, k);
  const float scale = style.attn_scale > 0 ? style.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  ops::attention(e, q, Hq, kv, layer, L.window, scale, s, b.att);
  e.emit("attn", layer, b.att);
  if (fused) {
    ops::linear_add(e, L.o, b.att, b.h);  // h += o
  } else {
    ops::linear(e, L.o, b.att, b.tmp);
    e.emit("o", layer, b.tmp);
  }
}

void Decoder::feed_forward(const DecoderLayer& L, int layer, Buffers& b,
                           const ops::NormWeight* in_norm) {
  const ops::Exec& e = exec_;
  if (L.moe) {
    const Moe& m = *L.moe;
    // Fused: the norm runs in the router's projection (the experts read the b.xn it writes)
    // and the combine adds into b.h itself.
    ops::MoeFusion f;
    if (in_norm) f = {true, in_norm, b.h};
    ops::moe(e, m.router, m.gate, m.up, m.down, m.top_k, m.norm_topk_prob, b.xn,
             b.gates.sub(0, m.num_experts), b.experts, b.expert_weights, in_norm ? b.h : b.tmp, f);
    if (in_norm) e.emit("ffn_norm", layer, b.xn);
    return;
  }
  const std::int64_t I = L.down.in();
  ops::Act g = b.g.sub(0, I), u = b.u.sub(0, I), act = b.act.sub(0, I);
  g.stride = u.stride = act.stride = I;
  if (in_norm && L.gate_up.defined()) {  // fused: norm and gate_up; activation, down and add
    ops::Act gu = b.gu.sub(0, 2 * I);
    gu.stride = 2 * I;
    ops::norm_linear(e, *in_norm, b.h, b.xn, L.gate_up, gu);
    ops::gated_linear_add(e, style.activation, gu, act, L.down, b.h);  // h += down(act(gu))
    return;
  }
  // The first projection normalizes b.h into b.xn when fused.
  auto project = [&](const ops::LinearWeight& w, ops::Act y) {
    if (in_norm) {
      ops::norm_linear(e, *in_norm, b.h, b.xn, w, y);
      e.emit("ffn_norm", layer, b.xn);
    } else {
      ops::linear(e, w, b.xn, y);
    }
  };
  if (L.gate_up.defined()) {
    ops::Act gu = b.gu.sub(0, 2 * I);
    gu.stride = 2 * I;
    project(L.gate_up, gu);
    g = gu.sub(0, I);
    u = gu.sub(I, I);
  } else {
    project(L.gate, g);
    ops::linear(e, L.up, b.xn, u);
  }
  e.emit("gate", layer, g);
  e.emit("up", layer, u);
  ops::gated_activation(e, style.activation, g, u, act);
  e.emit("act", layer, act);
  if (in_norm) {
    ops::linear_add(e, L.down, act, b.h);  // h += down
  } else {
    ops::linear(e, L.down, act, b.tmp);
    e.emit("down", layer, b.tmp);
  }
}

std::vector<ops::OpSignature> Decoder::required_ops() const {
  const DType act = exec_.act();
  const int hd = static_cast<int>(config_.head_dim);
  std::vector<ops::OpSignature> out = {
      embed.signature(ops::Op::kEmbed, act), ops::op_signature(ops::Op::kRmsNorm, act),
      ops::op_signature(ops::Op::kAdd, act),  // add_rms_norm falls back to add + rms_norm
      ops::op_signature(ops::Op::kRopeKvAppend, act, hd), ops::op_signature(ops::Op::kAttention, act, hd),
      ops::op_signature(ops::Op::kGatherRows, act), ops::op_signature(ops::Op::kSample, act),
      (lm_head ? *lm_head : embed).signature(ops::Op::kLinear, act)};
  auto linear = [&](const ops::LinearWeight& w) {
    if (w.defined()) out.push_back(w.signature(ops::Op::kLinear, act));
  };
  for (const DecoderLayer& L : layers) {
    for (const ops::LinearWeight* w : {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate, &L.up, &L.gate_up, &L.down})
      linear(*w);
    if (L.moe) {
      linear(L.moe->router);
      out.push_back(ops::op_signature(ops::Op::kMoeRoute, act));
      out.push_back(L.moe->gate.signature(ops::Op::kMoeExperts, act));
    } else {
      out.push_back(ops::op_signature(ops::Op::kGatedActivation, act));
    }
  }
  return out;
}

ops::Act Decoder::forward_logits(const ops::StepInputs& step, const ops::KvLayout& kv) {
  const ops::Exec& e = exec_;
  const std::int64_t T = step.n_tokens(), R = static_cast<std::int64_t>(step.logit_rows.size());
  MLXCEL_CHECK(T > 0, ErrorCategory::kInternal, "forward: empty step");
  const bool graph = ops::StepGraphs::eligible(e, T, step.n_seqs);
  const ops::StepView s = step_block_.upload(e.backend(), step, graph);
  Buffers b;
  plan(T, R, b);
  if (!graph) {
    run_step(kv, s, R, b);
  } else {
    const ops::StepGraphs::Shape shape{T, s.n_seqs, R, s.max_blocks};
    const ops::StepGraphs::Memory mem{workspace_.data(), workspace_.capacity(),
                                      step_block_.data(), step_block_.bytes(),
                                      kv.base,            kv.num_blocks,
                                      e.backend().capture_epoch()};
    ops::check_token_ids(embed, s);  // a replay runs none of the ops' host checks
    graphs_.run(e, shape, mem, [&] { run_step(kv, s, R, b); }, b.logits);
  }
  return b.logits;
}

void Decoder::run_step(const ops::KvLayout& kv, const ops::StepView& s, std::int64_t R,
                       Buffers& b) {
  const ModelConfig& c = config_;
  const ops::Exec& e = exec_;
  const std::int64_t D = c.hidden_size;
  float scale = 1.0f;
  if (style.embed_scale) scale = bf16(std::sqrt(static_cast<float>(D))).to_float();
  ops::embed(e, embed, s, b.h, scale);
  e.emit("embed", -1, b.h);
  // Fused form: each norm runs inside the projection that reads it (norm_linear) and each
  // residual add inside the projection that produces it (linear_add), so a GPU decode step has
  // no separate norm or add launch in a dense layer. Sandwich norms (a norm between projection
  // and add) and traces (which record the projections' own outputs) take the unfused form, and so
  // do steps of more than kFusedMaxTokens tokens (prefill), where the GPU's GEMM runs: with the
  // fused form there prefill measured 0.2-0.9 % slower (run 28, the GEMM epilogue staged through
  // shared memory; 5-9 % before, run 26, though most of that was the old epilogue's register
  // spills, which hit both forms). Both forms give the same bits.
  const bool fused = !style.sandwich_norms && !e.tap && s.n_tokens <= kFusedMaxTokens;
  if (fused) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      DecoderLayer& L = layers[l];
      const int li = static_cast<int>(l);
      attention(L, li, kv, s, b, &L.input_norm);
      feed_forward(L, li, b, &L.post_attn_norm);
      e.emit("h", li, b.h);
    }
    ops::gather_rows(e, b.h, step_block_.logit_rows(), step_block_.host_logit_rows(), R, b.picked);
    ops::norm_linear(e, final_norm, b.picked, b.normed, lm_head ? *lm_head : embed, b.logits);
    e.emit("final_norm", -1, b.normed);
    e.emit("logits", -1, b.logits);
    return;
  }
  // Unfused form: each layer's closing residual add runs fused with the next layer's input
  // norm (add_rms_norm: the norm reads the stored sum, as add then rms_norm would). Only the
  // first layer's norm and the last add stand alone.
  if (!layers.empty()) ops::rms_norm(e, b.h, layers[0].input_norm, b.xn);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    DecoderLayer& L = layers[l];
    const int li = static_cast<int>(l);
    e.emit("attn_norm", li, b.xn);
    attention(L, li, kv, s, b, nullptr);
    if (style.sandwich_norms) {
      ops::rms_norm(e, b.tmp, L.post_attn_norm, b.tmp);
      ops::add_rms_norm(e, b.h, b.tmp, L.pre_ff_norm, b.xn);
      e.emit("ffn_norm", li, b.xn);
      feed_forward(L, li, b, nullptr);
      ops::rms_norm(e, b.tmp, L.post_ff_norm, b.tmp);
    } else {
      ops::add_rms_norm(e, b.h, b.tmp, L.post_attn_norm, b.xn);
      e.emit("ffn_norm", li, b.xn);
      feed_forward(L, li, b, nullptr);
    }
    if (l + 1 < layers.size()) {
      ops::add_rms_norm(e, b.h, b.tmp, layers[l + 1].input_norm, b.xn);
    } else {
      ops::add(e, b.h, b.tmp, b.h);
    }
    e.emit("h", li, b.h);
  }
  // Final norm and the output projection, only for the rows whose logits are wanted, in one
  // call for the whole step so the (often largest) output matrix is read once.
  ops::gather_rows(e, b.h, step_block_.logit_rows(), step_block_.host_logit_rows(), R, b.picked);
  ops::rms_norm(e, b.picked, final_norm, b.normed);
  e.emit("final_norm", -1, b.normed);
  ops::linear(e, lm_head ? *lm_head : embed, b.normed, b.logits);
  e.emit("logits", -1, b.logits);
}

}  // namespace mlxcel::models
