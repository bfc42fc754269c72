#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/mlx_compat.h"
#include "backend/cpu/mlx_matmul.h"
#include "backend/cpu/paged_attention.h"
#include "backend/cpu/qmatmul.h"
#include "backend/cpu/rms_norm.h"
#include "backend/cpu/rope.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"
#include "backend/cpu/sample.h"

namespace mlxcel::cpu {

using namespace backend;
using mlx_compat::round_to;

namespace {

float* f32(const Act& a) { return static_cast<float*>(a.data); }
float* row(const Act& a, std::int64_t r) { return f32(a) + r * a.stride; }

void round_rows(const Act& a, DType t) {
  if (t == DType::kF32) return;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    float* p = row(a, r);
    for (std::int64_t c = 0; c < a.cols; ++c) p[c] = round_to(t, p[c]);
  }
}

bool contiguous(const Act& a) { return a.stride == a.cols || a.rows <= 1; }

float load_float(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return static_cast<const bf16*>(base)[i].to_float();
    case DType::kF16: return static_cast<const f16*>(base)[i].to_float();
    default: return static_cast<const float*>(base)[i];
  }
}

// Element j of an MLX-packed row (LSB-first bitstream, MLX_FORMATS.md §1.2).
std::uint32_t packed_code(const std::uint8_t* r, std::int64_t j, int bits) {
  const std::int64_t o = j * bits;
  const std::uint8_t* p = r + (o >> 3);
  const int s = static_cast<int>(o & 7);
  std::uint32_t v = p[0];
  if (s + bits > 8) v |= static_cast<std::uint32_t>(p[1]) << 8;
  return (v >> s) & ((1u << bits) - 1u);
}

// The CPU reads the checkpoint's layout (it never asks for paired scales).
void check_unpaired(const Matrix& m) {
  MLXCEL_CHECK(m.scale_step == 1, ErrorCategory::kInternal,
               "cpu: a matrix with paired scales (a GPU upload layout) reached the CPU backend");
}

QWeight qweight(const Matrix& m) {
  check_unpaired(m);
  QWeight q;
  q.w = static_cast<const std::uint32_t*>(m.w);
  q.scales = m.scales;
  q.scales_dtype = m.scales_dtype;
  q.biases = m.biases;
  switch (m.mode) {
    case backend::QMode::kMxfp4: q.mode = cpu::QMode::kMxfp4; break;
    case backend::QMode::kMxfp8: q.mode = cpu::QMode::kMxfp8; break;
    case backend::QMode::kNvfp4: q.mode = cpu::QMode::kNvfp4; break;
    default: q.mode = cpu::QMode::kAffine; break;
  }
  q.bits = m.bits;
  q.group_size = m.group_size;
  q.n = m.n;
  q.k = m.k;
  return q;
}

// The layer's K/V block pointers of one sequence, in sequence order (the kernels' PagedKv view).
struct SeqViews {
  std::vector<std::vector<void*>> k, v;
  std::vector<PagedKv> views;
  SeqViews(const KvLayout& kv, int layer, const StepView& s) {
    k.resize(static_cast<std::size_t>(s.n_seqs));
    v.resize(k.size());
    views.resize(k.size());
    for (std::int64_t i = 0; i < s.n_seqs; ++i) {
      const std::int32_t* table = s.host_block_tables + i * s.max_blocks;
      for (std::int64_t b = 0; b < s.max_blocks && table[b] >= 0; ++b) {
        k[i].push_back(kv.k_block(layer, table[b]));
        v[i].push_back(kv.v_block(layer, table[b]));
      }
      PagedKv& pv = views[i];
      pv.k_blocks = k[i].data();
      pv.v_blocks = v[i].data();
      pv.block_size = kv.block_size;
      pv.n_kv_heads = kv.n_kv_heads;
      pv.head_dim = kv.head_dim;
      pv.v_dim = kv.v_dim;
      pv.dtype = kv.dtype;
    }
  }
};

float activate(Activation a, float x) {
  if (a == Activation::kGeluApprox) {
    constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi), as nn.gelu_approx
    return 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x)));
  }
  return x / (1.0f + std::exp(-x));
}

}  // namespace

CpuBackend::CpuBackend(Numerics numerics) : numerics_(numerics) {}

std::string CpuBackend::name() const {
  return "cpu (" + std::string(isa_name(active_isa())) + ", " + numerics_name(numerics_) +
         " numerics)";
}

bool CpuBackend::supports(const OpSignature& sig) const {
  // Every op, every activation dtype and every MLX weight format has a CPU kernel.
  return sig.act == DType::kF32 || sig.act == DType::kBF16 || sig.act == DType::kF16;
}

DeviceBuffer CpuBackend::allocate(MemoryKind kind, std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p)
    throw_error(ErrorCategory::kOutOfMemory,
                "cannot allocate " + std::to_string(bytes >> 20) + " MiB of host memory");
  std::memset(p, 0, rounded);
  return DeviceBuffer(this, p, bytes, kind);
}

void CpuBackend::release(void* data, std::size_t, MemoryKind) { std::free(data); }

void CpuBackend::copy(void* dst, const void* src, std::size_t bytes, CopyKind) {
  if (bytes) std::memcpy(dst, src, bytes);
}

void CpuBackend::embed(const EmbedArgs& a) {
  const Matrix& t = a.table;
  check_unpaired(t);
  const std::int64_t dim = t.k;
  for (std::int64_t i = 0; i < a.n; ++i) {
    const std::int32_t id = a.host_ids[i];
    float* o = row(a.out, i);
    if (t.mode == backend::QMode::kAffine) {
      // mx.dequantize (QuantizedEmbedding) computes scale * q and then + bias in the scales
      // dtype, rounding after each.
      const DType st = t.scales_dtype;
      const std::int64_t groups = dim / t.group_size;
      const auto* r = static_cast<const std::uint8_t*>(t.w) + id * (dim * t.bits / 8);
      for (std::int64_t k = 0; k < dim; ++k) {
        const std::int64_t g = id * groups + k / t.group_size;
        const float sc = load_float(t.scales, st, g), b = load_float(t.biases, st, g);
        const float q = static_cast<float>(packed_code(r, k, t.bits));
        o[k] = round_to(st, round_to(st, sc * q) + b);
      }
    } else if (t.mode != backend::QMode::kNone) {
      qdecode_rows(qweight(t), id, id + 1, o);
    } else {
      for (std::int64_t k = 0; k < dim; ++k) o[k] = load_float(t.w, t.w_dtype, id * dim + k);
    }
    if (a.scale != 1.0f) {
      for (std::int64_t k = 0; k < dim; ++k) o[k] = round_to(a.round, o[k] * a.scale);
    }
  }
}

void CpuBackend::rms_norm(const RmsNormArgs& a) {
  if (a.heads > 1) {
    RmsNormArgs b = a;
    b.heads = 1;
    if (contiguous(a.x) && contiguous(a.y)) {
      b.x = a.x.head_rows(a.heads);
      b.y = a.y.head_rows(a.heads);
      return rms_norm(b);
    }
    const std::int64_t hd = a.x.cols / a.heads;
    for (std::int64_t r = 0; r < a.x.rows; ++r) {
      b.x = Act{row(a.x, r), DType::kF32, a.heads, hd, hd};
      b.y = Act{row(a.y, r), DType::kF32, a.heads, hd, hd};
      rms_norm(b);
    }
    return;
  }
  const std::int64_t rows = a.x.rows, cols = a.x.cols;
  if (a.round == DType::kF32 && numerics_ == Numerics::kFast) {
    if (contiguous(a.y)) {
      cpu::rms_norm(a.x.data, a.weight, a.y.data, rows, cols, a.x.stride, a.eps, DType::kF32);
    } else {
      for (std::int64_t r = 0; r < rows; ++r)
        cpu::rms_norm(row(a.x, r), a.weight, row(a.y, r), 1, cols, cols, a.eps, DType::kF32);
    }
    return;
  }
  // MLX's rms_norm: a sequential fp32 sum of squares, mean = sum * (1/n) with 1/n rounded to
  // fp32 (mx.mean multiplies; at a width that is not a power of two, dividing by n rounds
  // differently: 576-, 320-, 640-wide models showed it), 1 / sqrt(mean + eps), and for half
  // inputs y = round(round(x * r) * w).
  const DType t = a.round;
  const float inv_n = static_cast<float>(1.0 / static_cast<double>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = row(a.x, r);
    float ss = 0.0f;
    for (std::int64_t c = 0; c < cols; ++c) ss += xr[c] * xr[c];
    const float inv = 1.0f / std::sqrt(ss * inv_n + a.eps);
    float* yr = row(a.y, r);
    for (std::int64_t c = 0; c < cols; ++c) yr[c] = round_to(t, round_to(t, xr[c] * inv) * a.weight[c]);
  }
}

void CpuBackend::add(const AddArgs& a) {
  for (std::int64_t r = 0; r < a.y.rows; ++r) {
    const float* x = row(a.a, r);
    const float* y = row(a.b, r);
    float* o = row(a.y, r);
    for (std::int64_t c = 0; c < a.y.cols; ++c) o[c] = round_to(a.round, x[c] + y[c]);
  }
}

void CpuBackend::add_rms_norm(const AddRmsNormArgs& a) {
  // The unfused twin is exact here: the CPU has no faster fused form worth its own kernel.
  add({a.h, a.delta, a.h, a.round});
  rms_norm({a.h, a.weight, a.eps, a.y, a.round});
}

void CpuBackend::linear(const LinearArgs& a) {
  if (a.norm_weight) {  // the fused input norm: rms_norm, then the plain linear
    rms_norm({a.norm_src, a.norm_weight, a.norm_eps, a.x, a.round, 1});
    LinearArgs rest = a;
    rest.norm_weight = nullptr;
    return linear(rest);
  }
  if (a.gated_in) {  // the gated activation of gated_src's halves into x, then the product
    const std::int64_t k = a.x.cols;
    gated_activation({a.gated_act, a.gated_src.sub(0, k), a.gated_src.sub(k, k), a.x, a.round});
    LinearArgs rest = a;
    rest.gated_in = false;
    return linear(rest);
  }
  if (a.accumulate) {  // y += the rounded product: linear into a temporary, then add
    std::vector<float> prod(static_cast<std::size_t>(a.y.rows * a.y.cols));
    LinearArgs rest = a;
    rest.accumulate = false;
    rest.y = Act{prod.data(), a.y.dtype, a.y.rows, a.y.cols, a.y.cols};
    linear(rest);
    return add({a.y, rest.y, a.y, a.round});
  }
  const std::int64_t m = a.x.rows, n = a.w.n;
  if (m <= 0 || n == 0) return;
  MLXCEL_CHECK(contiguous(a.x) && contiguous(a.y) && a.x.cols == a.w.k && a.y.cols == n,
               ErrorCategory::kInternal, "cpu linear: x and y must be contiguous [m, k] / [m, n]");
  float* y = f32(a.y);
  auto add_bias = [&] {
    if (!a.bias) return;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) y[i * n + j] += a.bias[j];
  };
  const float* x = f32(a.x);
  if (a.w.mode != backend::QMode::kNone) {
    const QWeight q = qweight(a.w);
    if (numerics_ == Numerics::kMlx) {
      // MLX adds the bias as a separate op on the product in the activation dtype.
      qmatmul_mlx(q, x, m, a.round, y);
      add_bias();
    } else {
      qmatmul(q, x, m, a.bias, y);
    }
  } else if (numerics_ == Numerics::kMlx) {
    matmul_mlx(x, m, a.w.w, a.w.w_dtype, n, a.w.k, y);
    add_bias();
  } else {
    MatmulArgs mm;
    mm.x = x;
    mm.x_dtype = DType::kF32;
    mm.w = a.w.w;
    mm.w_dtype = a.w.w_dtype;
    mm.y = y;
    mm.y_dtype = DType::kF32;
    mm.m = m;
    mm.n = n;
    mm.k = a.w.k;
    matmul(mm);
    add_bias();
  }
  round_rows(a.y, a.round);
}

void CpuBackend::rope_kv_append(const RopeKvAppendArgs& a) {
  if (a.q_norm) rms_norm({a.q, a.q_norm, a.q_norm_eps, a.q, a.round, a.n_heads});
  if (a.k_norm) rms_norm({a.k, a.k_norm, a.k_norm_eps, a.k, a.round, a.n_kv_heads});
  const StepView& s = a.step;
  const std::int64_t T = s.n_tokens;
  const int hd = a.head_dim;
  auto rope = [&](const Act& x, int heads) {
    RopeArgs r;
    r.x = r.y = x.data;
    r.dtype = DType::kF32;
    r.n_heads = heads;
    r.seq_len = T;
    r.head_dim = hd;
    r.x_head_stride = r.y_head_stride = hd;
    r.x_row_stride = r.y_row_stride = x.stride;
    r.positions = s.host_positions;
    r.dims = a.rope.dims;
    r.traditional = a.rope.traditional;
    r.base = a.rope.base;
    r.scale = a.rope.scale;
    r.input_scale = a.rope.input_scale;
    r.freqs = a.rope.host_freqs;
    if (numerics_ == Numerics::kMlx) {
      r.mlx_numerics = true;
      r.mlx_rounding = a.round;
    }
    cpu::rope(r);
    round_rows(x, a.round);
  };
  rope(a.q, a.n_heads);
  rope(a.k, a.n_kv_heads);
  SeqViews sv(a.kv, a.layer, s);
  for (std::int64_t t = 0; t < T; ++t)
    paged_kv_write(sv.views[s.host_seq_of_token[t]], s.host_positions[t], row(a.k, t), row(a.v, t));
}

void CpuBackend::attention(const AttentionArgs& a) {
  const StepView& s = a.step;
  const std::int64_t T = s.n_tokens;
  const int Hq = a.n_heads, Hk = a.kv.n_kv_heads, group = Hq / Hk;
  SeqViews sv(a.kv, a.layer, s);
  const bool mlx = numerics_ == Numerics::kMlx;
  // One task per (token, KV head group): independent outputs, shared read-only cache.
  default_thread_pool().parallel_for(T * Hk, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const std::int64_t t = i / Hk;
      const int g = static_cast<int>(i % Hk);
      const std::int32_t seq = s.host_seq_of_token[t];
      const float* q = row(a.q, t);
      float* o = row(a.out, t);
      if (mlx) {
        const std::vector<std::int64_t>* order =
            s.window_order && a.window > 0 ? &(*s.window_order)[static_cast<std::size_t>(seq)] : nullptr;
        const bool rotated = order && !order->empty();
        paged_attention_mlx(q, Hq, sv.views[seq], s.host_positions[t], a.window, a.scale, a.round,
                            o, g * group, (g + 1) * group, rotated ? order->data() : nullptr,
                            rotated ? static_cast<std::int64_t>(order->size()) : 0);
      } else {
        paged_attention(q, Hq, sv.views[seq], s.host_positions[t], a.window, a.scale, o,
                        g * group, (g + 1) * group);
      }
    }
  });
  round_rows(a.out, a.round);
}

void CpuBackend::gated_activation(const GatedActivationArgs& a) {
  const DType t = a.round;
  for (std::int64_t r = 0; r < a.out.rows; ++r) {
    const float* g = row(a.g, r);
    const float* u = row(a.u, r);
    float* o = row(a.out, r);
    if (numerics_ == Numerics::kMlx) {
      for (std::int64_t i = 0; i < a.out.cols; ++i) {
        const float v = a.act == Activation::kGeluApprox ? mlx_compat::gelu_approx(g[i], t)
                                                          : mlx_compat::silu(g[i], t);
        o[i] = round_to(t, v * u[i]);
      }
    } else {
      for (std::int64_t i = 0; i < a.out.cols; ++i) {
        const float v = round_to(t, activate(a.act, g[i]));
        o[i] = round_to(t, v * u[i]);
      }
    }
  }
}

void CpuBackend::moe_route(const MoeRouteArgs& a) {
  if (a.with_router) CpuBackend::linear(a.router);  // not virtual: a recording runs this as one op
  // mlx-lm qwen3_moe: softmax(router(x), precise) in fp32 with MLX's exp, rounded to the
  // activation dtype; the top-k experts as mx.argpartition picks them (std::nth_element over the
  // indices with (value, index) ordering, the last k); optional renormalization by their sum.
  const DType t = a.round;
  const std::int64_t T = a.gates.rows, E = a.gates.cols;
  const int K = a.top_k;
  std::vector<std::int32_t> idx(static_cast<std::size_t>(E));
  std::vector<float> g(static_cast<std::size_t>(E));
  for (std::int64_t tok = 0; tok < T; ++tok) {
    const float* in = row(a.gates, tok);
    const float mx = *std::max_element(in, in + E);
    float z = 0.0f;
    for (std::int64_t e = 0; e < E; ++e) {
      g[e] = mlx_compat::exp(in[e] - mx);
      z = z + g[e];
    }
    const float inv = 1.0f / z;
    for (std::int64_t e = 0; e < E; ++e) g[e] = round_to(t, g[e] * inv);
    std::iota(idx.begin(), idx.end(), 0);
    std::nth_element(idx.begin(), idx.begin() + (E - K), idx.end(), [&](std::int32_t x, std::int32_t y) {
      return g[x] < g[y] || (g[x] == g[y] && x < y);
    });
    float sum = 0.0f;
    for (int j = 0; j < K; ++j) sum = sum + g[idx[E - K + j]];
    sum = round_to(t, sum);
    for (int j = 0; j < K; ++j) {
      const std::int32_t e = idx[E - K + j];
      a.experts[tok * K + j] = e;
      a.weights[tok * K + j] = a.norm_topk_prob ? round_to(t, g[e] / sum) : g[e];
    }
  }
}

void CpuBackend::moe_experts(const MoeExpertsArgs& a) {
  // Each expert runs once over the tokens routed to it (one weight read per step); ys[t][j] is
  // token t's j-th expert output; the combine sums the rounded weighted outputs in fp32.
  const DType t_act = a.round;
  const std::int64_t T = a.x.rows, H = a.x.cols, I = a.gate.n;
  const int K = a.top_k;
  std::int64_t E = 0;
  for (std::int64_t i = 0; i < T * K; ++i) E = std::max<std::int64_t>(E, a.experts[i] + 1);
  std::vector<std::vector<std::pair<std::int64_t, int>>> per_expert(static_cast<std::size_t>(E));
  for (std::int64_t tok = 0; tok < T; ++tok)
    for (int j = 0; j < K; ++j) per_expert[a.experts[tok * K + j]].push_back({tok, j});
  std::vector<float> ys(static_cast<std::size_t>(T * K * H)), xs, ga, ub, y;
  auto view = [](std::vector<float>& v, std::int64_t rows, std::int64_t cols) {
    return Act{v.data(), DType::kF32, rows, cols, cols};
  };
  for (std::int64_t e = 0; e < E; ++e) {
    const auto& rows = per_expert[e];
    if (rows.empty()) continue;
    const std::int64_t n = static_cast<std::int64_t>(rows.size());
    xs.resize(static_cast<std::size_t>(n * H));
    for (std::int64_t r = 0; r < n; ++r) std::copy_n(row(a.x, rows[r].first), H, xs.data() + r * H);
    ga.resize(static_cast<std::size_t>(n * I));
    ub.resize(static_cast<std::size_t>(n * I));
    linear({view(xs, n, H), a.gate.expert(e), nullptr, view(ga, n, I), t_act});
    linear({view(xs, n, H), a.up.expert(e), nullptr, view(ub, n, I), t_act});
    gated_activation({a.act, view(ga, n, I), view(ub, n, I), view(ga, n, I), t_act});
    y.resize(static_cast<std::size_t>(n * H));
    linear({view(ga, n, I), a.down.expert(e), nullptr, view(y, n, H), t_act});
    for (std::int64_t r = 0; r < n; ++r)
      std::copy_n(y.data() + r * H, H, ys.data() + (rows[r].first * K + rows[r].second) * H);
  }
  for (std::int64_t tok = 0; tok < T; ++tok) {
    float* o = row(a.out, tok);
    for (std::int64_t d = 0; d < H; ++d) {
      float acc = 0.0f;
      for (int j = 0; j < K; ++j)
        acc = acc + round_to(t_act, ys[(tok * K + j) * H + d] * a.weights[tok * K + j]);
      o[d] = a.accumulate ? round_to(t_act, o[d] + round_to(t_act, acc)) : round_to(t_act, acc);
    }
  }
}

void CpuBackend::gather_rows(const GatherRowsArgs& a) {
  for (std::int64_t i = 0; i < a.n; ++i)
    std::copy_n(row(a.src, a.host_rows[i]), a.src.cols, row(a.dst, i));
}

void CpuBackend::sample(const SampleArgs& a) {
  const std::int64_t vocab = a.logits.cols;
  for (std::int64_t i = 0; i < a.n; ++i) {
    const SampleRow& r = a.rows[i];
    const std::uint32_t* mask = r.mask_row >= 0 ? a.masks + r.mask_row * a.mask_words : nullptr;
    sample_row(row(a.logits, r.logit_row), vocab, r, a.procs, mask, a.scratch + i * vocab, &a.out[i]);
  }
}

}  // namespace mlxcel::cpu
