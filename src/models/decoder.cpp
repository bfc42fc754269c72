#include "models/decoder.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/mlx_compat.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/rms_norm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "quant/quantize.h"

namespace mlxcel::models {

void Norm::apply(const float* x, std::int64_t rows, std::int64_t cols, float* y,
                 Numerics numerics) const {
  // MLX's rms_norm: a sequential fp32 sum of squares, 1 / sqrt(mean + eps), (x * r) * w.
  if (act == DType::kF32 && numerics == Numerics::kFast) return cpu::rms_norm(x, weight.data(), y, rows, cols, cols, eps, DType::kF32);
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float ss = 0.0f;
    for (std::int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(cols) + eps);
    float* yr = y + r * cols;
    for (std::int64_t c = 0; c < cols; ++c)
      yr[c] = quant::round_to(act, quant::round_to(act, xr[c] * inv) * weight[c]);
  }
}

void Decoder::round_act(float* x, std::int64_t n) const {
  if (act_dtype == DType::kF32) return;
  for (std::int64_t i = 0; i < n; ++i) x[i] = quant::round_to(act_dtype, x[i]);
}

Norm load_norm(const WeightSource& w, const std::string& name, std::int64_t dim, float eps,
               bool plus_one) {
  Tensor t = w.get(name);
  if (t.shape() != Shape{dim})
    throw_error(ErrorCategory::kBadInput, w.describe() + ": tensor '" + name + "' has shape " +
                                              t.shape_str() + ", expected [" +
                                              std::to_string(dim) + "]");
  Norm n;
  n.eps = eps;
  n.weight = t.to_f32();
  if (plus_one) {
    // mlx-lm computes 1.0 + weight in the weight's dtype.
    for (auto& v : n.weight) v = quant::round_to(t.dtype(), 1.0f + v);
  }
  return n;
}

Moe load_switch_moe(const WeightSource& w, const std::string& prefix, const ModelConfig& c) {
  Moe m;
  m.top_k = static_cast<int>(c.num_experts_per_tok);
  m.norm_topk_prob = c.norm_topk_prob;
  m.router = Linear::load(w, prefix + ".gate", c.hidden_size, c.num_experts, false);
  const std::int64_t E = c.num_experts, H = c.hidden_size, I = c.moe_intermediate_size;
  auto stack = [&](const char* proj, std::int64_t in, std::int64_t out, std::vector<Linear>& dst) {
    std::string mod = prefix + ".switch_mlp." + proj;
    Tensor weight = w.get(mod + ".weight");
    auto q = w.quant_for(mod);
    Tensor scales, biases;
    if (q) {
      scales = w.get(mod + ".scales");
      if (has_biases(q->mode)) biases = w.get(mod + ".biases");
      check_quantized_shapes(weight, scales, biases.defined() ? &biases : nullptr, *q, mod);
      check_scales(scales, biases.defined() ? &biases : nullptr, *q, mod);
    }
    const std::int64_t packed_in = q ? in * q->bits / 32 : in;
    if (weight.shape() != Shape{E, out, packed_in})
      throw_error(ErrorCategory::kBadInput,
                  w.describe() + ": tensor '" + mod + ".weight' has shape " + weight.shape_str() +
                      ", expected [" + std::to_string(E) + ", " + std::to_string(out) + ", " +
                      std::to_string(packed_in) + "] (stacked experts)");
    for (std::int64_t e = 0; e < E; ++e) {
      dst.push_back(Linear::from_tensors(mod + "[" + std::to_string(e) + "]", weight.select(0, e),
                                         q ? scales.select(0, e) : Tensor(),
                                         biases.defined() ? biases.select(0, e) : Tensor(), q, in,
                                         out));
    }
  };
  stack("gate_proj", H, I, m.gate);
  stack("up_proj", H, I, m.up);
  stack("down_proj", I, H, m.down);
  return m;
}

void load_embeddings_and_head(Decoder& d, const WeightSource& w) {
  const ModelConfig& c = d.config();
  d.embed = Linear::load_embedding(w, "model.embed_tokens", c.vocab_size, c.hidden_size);
  d.final_norm = load_norm(w, "model.norm.weight", c.hidden_size, static_cast<float>(c.rms_norm_eps),
                           d.style.norm_plus_one);
  if (!c.tie_word_embeddings || (c.family == Family::kGemma3Text && w.has("lm_head.weight")))
    d.lm_head = Linear::load(w, "lm_head", c.hidden_size, c.vocab_size, false);
}

Decoder::Decoder(ModelConfig config, DecoderStyle s) : Model(std::move(config)), style(s) {}

std::size_t Decoder::weight_bytes() const {
  std::size_t b = embed.weight_bytes() + (lm_head ? lm_head->weight_bytes() : 0);
  for (const auto& L : layers) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate, &L.up, &L.gate_up, &L.down})
      b += l->weight_bytes();
    if (L.moe) {
      b += L.moe->router.weight_bytes();
      for (const auto* v : {&L.moe->gate, &L.moe->up, &L.moe->down})
        for (const auto& l : *v) b += l.weight_bytes();
    }
  }
  return b;
}

std::size_t Decoder::decode_bytes_per_token() const {
  std::size_t b = lm_head ? lm_head->weight_bytes() + embed.weight_bytes() / static_cast<std::size_t>(embed.out())
                          : embed.weight_bytes();
  for (const auto& L : layers) {
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.qkv, &L.o, &L.gate, &L.up, &L.gate_up, &L.down})
      b += l->weight_bytes();
    if (L.moe) {
      b += L.moe->router.weight_bytes();
      std::size_t experts = 0;
      for (const auto* v : {&L.moe->gate, &L.moe->up, &L.moe->down})
        for (const auto& l : *v) experts += l.weight_bytes();
      b += experts * static_cast<std::size_t>(L.moe->top_k) / std::max<std::size_t>(1, L.moe->gate.size());
    }
  }
  return b;
}

void Decoder::emit(const char* name, int layer, const float* data, std::int64_t rows,
                   std::int64_t cols) const {
  if (tap) tap(name, layer, data, rows, cols);
}

namespace {
float activate(Activation a, float x);
}  // namespace

void Decoder::gated_activation(Activation a, float* g, const float* u, std::int64_t n) const {
  if (numerics_ == Numerics::kMlx) {
    const DType t = act_dtype;
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = a == Activation::kGeluApprox ? cpu::mlx_compat::gelu_approx(g[i], t)
                                                   : cpu::mlx_compat::silu(g[i], t);
      g[i] = cpu::mlx_compat::round_to(t, v * u[i]);
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) g[i] = activate(a, g[i]);
  round_act(g, n);
  for (std::int64_t i = 0; i < n; ++i) g[i] *= u[i];
  round_act(g, n);
}

namespace {

float activate(Activation a, float x) {
  if (a == Activation::kGeluApprox) {
    constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi), as nn.gelu_approx
    return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
  }
  return x / (1.0f + std::exp(-x));
}

}  // namespace

void Decoder::attention(DecoderLayer& L, int layer, std::span<BatchItem> batch,
                        const std::vector<std::int64_t>& pos, const std::vector<int>& item_of,
                        const float* xn, std::int64_t T, float* out) {
  const ModelConfig& c = config_;
  const int Hq = static_cast<int>(c.num_attention_heads), Hk = static_cast<int>(c.num_key_value_heads);
  const int hd = static_cast<int>(c.head_dim);
  const std::int64_t qn = static_cast<std::int64_t>(Hq) * hd, kn = static_cast<std::int64_t>(Hk) * hd;
  std::vector<float> q(static_cast<std::size_t>(T * qn)), k(static_cast<std::size_t>(T * kn)),
      v(static_cast<std::size_t>(T * kn));
  if (L.qkv.out() > 0) {
    std::vector<float> qkv(static_cast<std::size_t>(T * (qn + 2 * kn)));
    L.qkv.forward(xn, T, qkv.data(), numerics_, act_dtype);
    for (std::int64_t t = 0; t < T; ++t) {
      const float* r = qkv.data() + t * (qn + 2 * kn);
      std::copy(r, r + qn, q.data() + t * qn);
      std::copy(r + qn, r + qn + kn, k.data() + t * kn);
      std::copy(r + qn + kn, r + qn + 2 * kn, v.data() + t * kn);
    }
  } else {
    L.q.forward(xn, T, q.data(), numerics_, act_dtype);
    L.k.forward(xn, T, k.data(), numerics_, act_dtype);
    L.v.forward(xn, T, v.data(), numerics_, act_dtype);
  }
  round_act(q.data(), T * qn);
  round_act(k.data(), T * kn);
  round_act(v.data(), T * kn);
  emit("q", layer, q.data(), T, qn);
  emit("k", layer, k.data(), T, kn);
  emit("v", layer, v.data(), T, kn);
  if (style.qk_norm) {
    L.q_norm.apply(q.data(), T * Hq, hd, q.data(), numerics_);
    L.k_norm.apply(k.data(), T * Hk, hd, k.data(), numerics_);
  }
  // RoPE at each token's absolute position, then append K/V to the token's sequence.
  std::vector<std::vector<void*>> kblocks(batch.size()), vblocks(batch.size());
  std::vector<cpu::PagedKv> views(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto* kv = batch[i].kv;
    const auto& table = kv->block_table();
    for (std::size_t b = 0; b < table.size(); ++b) {
      kblocks[i].push_back(kv->k_block_of(layer, static_cast<std::int64_t>(b) * kv->block_size()));
      vblocks[i].push_back(kv->v_block_of(layer, static_cast<std::int64_t>(b) * kv->block_size()));
    }
    cpu::PagedKv& pv = views[i];
    pv.k_blocks = kblocks[i].data();
    pv.v_blocks = vblocks[i].data();
    pv.block_size = kv->block_size();
    pv.n_kv_heads = Hk;
    pv.head_dim = hd;
    pv.v_dim = hd;
    pv.dtype = kv_dtype_;
  }
  std::vector<std::int32_t> pos32(pos.begin(), pos.end());
  auto rope = [&](float* x, int heads) {
    cpu::RopeArgs a;
    a.x = a.y = x;
    a.dtype = DType::kF32;
    a.n_heads = heads;
    a.seq_len = T;
    a.head_dim = hd;
    a.x_head_stride = a.y_head_stride = hd;
    a.x_row_stride = a.y_row_stride = static_cast<std::int64_t>(heads) * hd;
    a.positions = pos32.data();
    L.rope.apply_to(a);
    if (numerics_ == Numerics::kMlx) {
      a.mlx_numerics = true;
      a.mlx_rounding = act_dtype;
    }
    cpu::rope(a);
  };
  rope(q.data(), Hq);
  rope(k.data(), Hk);
  round_act(q.data(), T * qn);
  round_act(k.data(), T * kn);
  emit("q_rope", layer, q.data(), T, qn);
  emit("k_rope", layer, k.data(), T, kn);
  for (std::int64_t t = 0; t < T; ++t)
    cpu::paged_kv_write(views[item_of[t]], pos[t], k.data() + t * kn, v.data() + t * kn);
  const float scale = style.attn_scale > 0 ? style.attn_scale : 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> att(static_cast<std::size_t>(T * qn));
  // One task per (token, KV head group): independent outputs, shared read-only cache.
  const int group = Hq / Hk;
  cpu::default_thread_pool().parallel_for(T * Hk, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t t = i / Hk;
      const int g = static_cast<int>(i % Hk);
      if (numerics_ == Numerics::kMlx) {
        const auto& order = window_keys_[item_of[t]];
        const bool rotated = L.window > 0 && !order.empty();
        cpu::paged_attention_mlx(q.data() + t * qn, Hq, views[item_of[t]], pos[t], L.window,
                                 scale, act_dtype, att.data() + t * qn, g * group,
                                 (g + 1) * group, rotated ? order.data() : nullptr,
                                 rotated ? static_cast<std::int64_t>(order.size()) : 0);
      }
      else
        cpu::paged_attention(q.data() + t * qn, Hq, views[item_of[t]], pos[t], L.window, scale,
                             att.data() + t * qn, g * group, (g + 1) * group);
    }
  });
  round_act(att.data(), T * qn);
  emit("attn", layer, att.data(), T, qn);
  L.o.forward(att.data(), T, out, numerics_, act_dtype);
  round_act(out, T * c.hidden_size);
  emit("o", layer, out, T, c.hidden_size);
}

void Decoder::moe_forward(const Moe& m, const float* xn, std::int64_t T, float* out) {
  // mlx-lm qwen3_moe: softmax(router(x), precise) in fp32 with MLX's exp, rounded to the
  // activation dtype; the top-k experts as mx.argpartition picks them (std::nth_element over the
  // indices with (value, index) ordering, the last k); optional renormalization by their sum;
  // the expert outputs weighted and summed in that order, with fp32 accumulation.
  using cpu::mlx_compat::round_to;
  const DType t_act = act_dtype;
  const std::int64_t H = config_.hidden_size, E = static_cast<std::int64_t>(m.gate.size());
  const std::int64_t I = m.gate.empty() ? 0 : m.gate[0].out();
  const int K = m.top_k;
  std::vector<float> gates(static_cast<std::size_t>(T * E));
  m.router.forward(xn, T, gates.data(), numerics_, act_dtype);
  round_act(gates.data(), T * E);
  std::vector<std::int32_t> chosen(static_cast<std::size_t>(T * K));
  std::vector<float> weight(static_cast<std::size_t>(T * K));
  std::vector<std::vector<std::pair<std::int64_t, int>>> per_expert(static_cast<std::size_t>(E));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < T; ++t) {
    float* g = gates.data() + t * E;
    const float mx = *std::max_element(g, g + E);
    float z = 0.0f;
    for (std::int64_t e = 0; e < E; ++e) {
      g[e] = cpu::mlx_compat::exp(g[e] - mx);
      z = z + g[e];
    }
    const float inv = 1.0f / z;
    for (std::int64_t e = 0; e < E; ++e) g[e] = round_to(t_act, g[e] * inv);
    std::iota(idx.begin(), idx.end(), 0);
    std::nth_element(idx.begin(), idx.begin() + (E - K), idx.end(), [&](std::int32_t a, std::int32_t b) {
      return g[a] < g[b] || (g[a] == g[b] && a < b);
    });
    float sum = 0.0f;
    for (int j = 0; j < K; ++j) sum = sum + g[idx[E - K + j]];
    sum = round_to(t_act, sum);
    for (int j = 0; j < K; ++j) {
      const std::int32_t e = idx[E - K + j];
      chosen[t * K + j] = e;
      weight[t * K + j] = m.norm_topk_prob ? round_to(t_act, g[e] / sum) : g[e];
      per_expert[e].push_back({t, j});
    }
  }
  // Each expert runs once over the tokens routed to it; ys[t][j] is token t's j-th expert output.
  std::vector<float> ys(static_cast<std::size_t>(T * K * H)), xs, a, b, y;
  for (std::int64_t e = 0; e < E; ++e) {
    const auto& rows = per_expert[e];
    if (rows.empty()) continue;
    const std::int64_t n = static_cast<std::int64_t>(rows.size());
    xs.resize(static_cast<std::size_t>(n * H));
    for (std::int64_t r = 0; r < n; ++r) std::copy(xn + rows[r].first * H, xn + (rows[r].first + 1) * H, xs.data() + r * H);
    a.resize(static_cast<std::size_t>(n * I));
    b.resize(static_cast<std::size_t>(n * I));
    m.gate[e].forward(xs.data(), n, a.data(), numerics_, act_dtype);
    m.up[e].forward(xs.data(), n, b.data(), numerics_, act_dtype);
    round_act(a.data(), n * I);
    round_act(b.data(), n * I);
    gated_activation(Activation::kSilu, a.data(), b.data(), n * I);
    y.resize(static_cast<std::size_t>(n * H));
    m.down[e].forward(a.data(), n, y.data(), numerics_, act_dtype);
    round_act(y.data(), n * H);
    for (std::int64_t r = 0; r < n; ++r)
      std::copy(y.data() + r * H, y.data() + (r + 1) * H, ys.data() + (rows[r].first * K + rows[r].second) * H);
  }
  for (std::int64_t t = 0; t < T; ++t) {
    float* o = out + t * H;
    for (std::int64_t d = 0; d < H; ++d) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j) acc = acc + round_to(t_act, ys[(t * K + j) * H + d] * weight[t * K + j]);
      o[d] = round_to(t_act, acc);
    }
  }
}

void Decoder::feed_forward(const DecoderLayer& L, int layer, const float* xn, std::int64_t T,
                           float* out) {
  if (L.moe) return moe_forward(*L.moe, xn, T, out);
  const std::int64_t I = L.down.in();
  std::vector<float> g(static_cast<std::size_t>(T * I)), u(static_cast<std::size_t>(T * I));
  if (L.gate_up.out() > 0) {
    std::vector<float> gu(static_cast<std::size_t>(T * 2 * I));
    L.gate_up.forward(xn, T, gu.data(), numerics_, act_dtype);
    for (std::int64_t t = 0; t < T; ++t) {
      std::copy(gu.data() + t * 2 * I, gu.data() + t * 2 * I + I, g.data() + t * I);
      std::copy(gu.data() + t * 2 * I + I, gu.data() + (t + 1) * 2 * I, u.data() + t * I);
    }
  } else {
    L.gate.forward(xn, T, g.data(), numerics_, act_dtype);
    L.up.forward(xn, T, u.data(), numerics_, act_dtype);
  }
  round_act(g.data(), T * I);
  round_act(u.data(), T * I);
  emit("gate", layer, g.data(), T, I);
  emit("up", layer, u.data(), T, I);
  gated_activation(style.activation, g.data(), u.data(), T * I);
  emit("act", layer, g.data(), T, I);
  L.down.forward(g.data(), T, out, numerics_, act_dtype);
  round_act(out, T * config_.hidden_size);
  emit("down", layer, out, T, config_.hidden_size);
}

void Decoder::forward(std::span<BatchItem> batch, std::vector<std::vector<float>>& logits) {
  const ModelConfig& c = config_;
  const std::int64_t D = c.hidden_size, V = c.vocab_size;
  std::vector<std::int32_t> tokens;
  std::vector<std::int64_t> pos;
  std::vector<int> item_of;
  std::vector<std::int64_t> starts(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    auto& it = batch[i];
    MLXCEL_CHECK(!it.tokens.empty(), ErrorCategory::kInternal, "forward: empty batch item");
    const std::int64_t start = it.kv->reserve(static_cast<std::int64_t>(it.tokens.size()));
    starts[i] = start;
    for (std::size_t j = 0; j < it.tokens.size(); ++j) {
      tokens.push_back(it.tokens[j]);
      pos.push_back(start + static_cast<std::int64_t>(j));
      item_of.push_back(static_cast<int>(i));
    }
  }
  kv_dtype_ = batch.empty() ? DType::kF32 : batch[0].kv->dtype();
  // --numerics mlx: replay mlx-lm's rotating sliding-window cache to get its key order.
  window_keys_.assign(batch.size(), {});
  std::int64_t window = 0;
  for (const auto& L : layers) window = std::max(window, L.window);
  if (numerics_ == Numerics::kMlx && window > 0) {
    for (std::size_t i = 0; i < batch.size(); ++i) {
      RotatingOrder& ro = batch[i].kv->rotating_order();
      const std::int64_t n = static_cast<std::int64_t>(batch[i].tokens.size());
      const std::int64_t start = starts[i];
      if (ro.max_size() != window || ro.offset() != start) {
        ro.reset(window);
        if (start > 0) ro.update(start);  // a reused prefix counts as one prefill
      }
      ro.update(n);
      if (n == 1) window_keys_[i] = ro.keys();
    }
  }
  const std::int64_t T = static_cast<std::int64_t>(tokens.size());
  std::vector<float> h(static_cast<std::size_t>(T * D)), xn(h.size()), tmp(h.size());
  embed.gather_rows(tokens.data(), T, h.data());
  if (style.embed_scale) {
    const float s = bf16(std::sqrt(static_cast<float>(D))).to_float();
    for (auto& x : h) x *= s;
    round_act(h.data(), T * D);
  }
  emit("embed", -1, h.data(), T, D);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    DecoderLayer& L = layers[l];
    const int li = static_cast<int>(l);
    L.input_norm.apply(h.data(), T, D, xn.data(), numerics_);
    emit("attn_norm", li, xn.data(), T, D);
    attention(L, static_cast<int>(l), batch, pos, item_of, xn.data(), T, tmp.data());
    if (style.sandwich_norms) {
      L.post_attn_norm.apply(tmp.data(), T, D, tmp.data(), numerics_);
      for (std::int64_t i = 0; i < T * D; ++i) h[i] += tmp[i];
      round_act(h.data(), T * D);
      L.pre_ff_norm.apply(h.data(), T, D, xn.data(), numerics_);
      emit("ffn_norm", li, xn.data(), T, D);
      feed_forward(L, li, xn.data(), T, tmp.data());
      L.post_ff_norm.apply(tmp.data(), T, D, tmp.data(), numerics_);
    } else {
      for (std::int64_t i = 0; i < T * D; ++i) h[i] += tmp[i];
      round_act(h.data(), T * D);
      L.post_attn_norm.apply(h.data(), T, D, xn.data(), numerics_);
      emit("ffn_norm", li, xn.data(), T, D);
      feed_forward(L, li, xn.data(), T, tmp.data());
    }
    for (std::int64_t i = 0; i < T * D; ++i) h[i] += tmp[i];
    round_act(h.data(), T * D);
    emit("h", li, h.data(), T, D);
  }
  // Final norm and the output projection, only for the rows whose logits are wanted, in one
  // call for the whole step so the (often largest) output matrix is read once.
  std::vector<std::int64_t> first(batch.size()), count(batch.size());
  std::int64_t row = 0, rows = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::int64_t n = static_cast<std::int64_t>(batch[i].tokens.size());
    first[i] = batch[i].all_logits ? row : row + n - 1;
    count[i] = batch[i].all_logits ? n : 1;
    rows += count[i];
    row += n;
  }
  std::vector<float> picked(static_cast<std::size_t>(rows * D)), normed(picked.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    std::copy(h.data() + first[i] * D, h.data() + (first[i] + count[i]) * D, picked.data() + at * D);
    at += count[i];
  }
  final_norm.apply(picked.data(), rows, D, normed.data(), numerics_);
  emit("final_norm", -1, normed.data(), rows, D);
  std::vector<float> all(static_cast<std::size_t>(rows * V));
  (lm_head ? *lm_head : embed).forward(normed.data(), rows, all.data(), numerics_, act_dtype);
  round_act(all.data(), rows * V);
  emit("logits", -1, all.data(), rows, V);
  logits.assign(batch.size(), {});
  at = 0;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    logits[i].assign(all.begin() + at * V, all.begin() + (at + count[i]) * V);
    at += count[i];
  }
  for (auto& it : batch) it.kv->commit(it.tokens);
}

}  // namespace mlxcel::models
