#include "ops/ops.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"

namespace mlxcel::ops {

using backend::DeviceBuffer;
using backend::MemoryKind;
using backend::Op;
using backend::OpSignature;
using backend::QMode;

namespace {

QMode qmode_of(const std::optional<QuantParams>& q) {
  if (!q) return QMode::kNone;
  switch (q->mode) {
    case QuantMode::kAffine: return QMode::kAffine;
    case QuantMode::kMxfp4: return QMode::kMxfp4;
    case QuantMode::kMxfp8: return QMode::kMxfp8;
    case QuantMode::kNvfp4: return QMode::kNvfp4;
  }
  return QMode::kNone;
}

// The device address of a host tensor's data: the tensor itself where host memory is device
// memory (mmap'd weights stay in the page cache, nothing is copied), else an uploaded copy.
const void* place(Backend& be, const Tensor& t, std::vector<std::shared_ptr<DeviceBuffer>>& keep) {
  if (!t.defined()) return nullptr;
  MLXCEL_CHECK(t.is_contiguous(), ErrorCategory::kInternal, "weight upload needs a contiguous tensor");
  if (be.host_memory_is_device_memory()) return t.raw();
  auto buf = std::make_shared<DeviceBuffer>(be.allocate(MemoryKind::kWeights, t.nbytes()));
  be.copy(buf->data(), t.raw(), t.nbytes(), backend::CopyKind::kHostToDevice);
  keep.push_back(buf);
  return buf->data();
}

std::shared_ptr<DeviceBuffer> upload_floats(Backend& be, const std::vector<float>& v,
                                            const float** where) {
  if (be.host_memory_is_device_memory()) {
    *where = v.data();
    return nullptr;
  }
  auto buf = std::make_shared<DeviceBuffer>(be.allocate(MemoryKind::kWeights, v.size() * sizeof(float)));
  be.copy(buf->data(), v.data(), v.size() * sizeof(float), backend::CopyKind::kHostToDevice);
  *where = static_cast<const float*>(buf->data());
  return buf;
}

// Tells the kernel a tensor's pages will not be read again (the parts of a stacked weight, once
// copied). MADV_PAGEOUT never changes data: clean pages of the mmap'd checkpoint are dropped, so
// resident memory does not hold both the parts and the stack; anonymous pages stay as they are.
void page_out(const Tensor& t) {
  if (!t.defined() || t.nbytes() == 0) return;
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(t.raw());
  const std::uintptr_t first = (begin + page - 1) / page * page, last = (begin + t.nbytes()) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_PAGEOUT);
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

void check_act(const Act& a, const char* op, const char* what) {
  MLXCEL_CHECK(a.data != nullptr || a.rows == 0, ErrorCategory::kInternal,
               std::string(op) + ": " + what + " has no data");
  MLXCEL_CHECK(a.stride >= a.cols, ErrorCategory::kInternal,
               std::string(op) + ": " + what + " has a row stride below its width");
}

void same_shape(const Act& a, const Act& b, const char* op) {
  MLXCEL_CHECK(a.rows == b.rows && a.cols == b.cols, ErrorCategory::kInternal,
               std::string(op) + ": shapes differ ([" + std::to_string(a.rows) + ", " +
                   std::to_string(a.cols) + "] vs [" + std::to_string(b.rows) + ", " +
                   std::to_string(b.cols) + "])");
}

OpSignature sig(Op op, DType act, int head_dim = 0) {
  OpSignature s;
  s.op = op;
  s.act = act;
  s.head_dim = head_dim;
  return s;
}

}  // namespace

// --- Exec ---

void Exec::emit(const char* name, int layer, const Act& a) const {
  if (!tap) return;
  std::vector<float> host(static_cast<std::size_t>(a.rows * a.cols));
  to_host(*this, a, host.data());
  tap(name, layer, host.data(), a.rows, a.cols);
}

OpSignature op_signature(Op op, DType act, int head_dim) { return sig(op, act, head_dim); }

void Exec::require(const OpSignature& s) const {
  if (!be_->supports(s))
    throw_error(ErrorCategory::kUnsupported,
                "the " + be_->name() + " backend has no kernel for " + s.str() +
                    "; run this model with --device cpu");
}

// --- Weights ---

LinearWeight LinearWeight::upload(Backend& be, std::string name, const Tensor& weight,
                                  const Tensor& scales, const Tensor& biases,
                                  const std::optional<QuantParams>& quant, std::int64_t in,
                                  std::int64_t out, const Tensor& bias) {
  LinearWeight l;
  l.name_ = std::move(name);
  l.quant_ = quant;
  l.weight_ = weight.contiguous();
  if (scales.defined()) l.scales_ = scales.contiguous();
  if (biases.defined()) l.biases_ = biases.contiguous();
  backend::Matrix& m = l.m_;
  m.n = out;
  m.k = in;
  m.mode = qmode_of(quant);
  m.w_dtype = l.weight_.dtype();
  if (quant) {
    m.bits = quant->bits;
    m.group_size = quant->group_size;
    m.scales_dtype = l.scales_.dtype();
  } else {
    MLXCEL_CHECK(is_float(m.w_dtype), ErrorCategory::kBadInput,
                 "'" + l.name_ + ".weight' is " + std::string(dtype_name(m.w_dtype)) +
                     " but is not marked quantized");
  }
  m.w = place(be, l.weight_, l.device_);
  if (m.mode == QMode::kAffine && l.biases_.defined() && !be.host_memory_is_device_memory() &&
      be.wants_paired_scales()) {
    // Scales and biases go up as one array of pairs (Matrix::scale_step 2): the same device
    // bytes, staged through a host copy that is freed once uploaded.
    MLXCEL_CHECK(l.biases_.dtype() == l.scales_.dtype() && l.biases_.numel() == l.scales_.numel(),
                 ErrorCategory::kBadInput,
                 "'" + l.name_ + "' has biases of another dtype or shape than its scales");
    const std::size_t es = dtype_size(l.scales_.dtype());
    Tensor pairs = Tensor::empty(l.scales_.dtype(), {2 * l.scales_.numel()});
    backend::pair_scales(l.scales_.raw(), l.biases_.raw(),
                         static_cast<std::size_t>(l.scales_.numel()), es, pairs.raw());
    m.scales = place(be, pairs, l.device_);
    m.biases = static_cast<const char*>(m.scales) + es;
    m.scale_step = 2;
  } else {
    m.scales = place(be, l.scales_, l.device_);
    m.biases = place(be, l.biases_, l.device_);
  }
  l.bytes_ = l.weight_.nbytes() + (scales.defined() ? l.scales_.nbytes() : 0) +
             (biases.defined() ? l.biases_.nbytes() : 0);
  if (bias.defined()) {
    l.bias_host_ = Tensor::from_f32(bias.to_f32(), {out}, DType::kF32);
    l.bias_ = static_cast<const float*>(place(be, l.bias_host_, l.device_));
    l.bytes_ += bias.nbytes();
  }
  return l;
}

LinearWeight LinearWeight::upload_stacked(Backend& be, std::string name, const Tensor& weight,
                                          const Tensor& scales, const Tensor& biases,
                                          const std::optional<QuantParams>& quant,
                                          std::int64_t in, std::int64_t out) {
  const std::int64_t E = weight.dim(0);
  LinearWeight l = upload(be, std::move(name), weight, scales, biases, quant, in, out);
  l.m_.expert_stride_w = l.weight_.nbytes() / static_cast<std::size_t>(E);
  // Paired scales (scale_step 2) hold each expert's biases beside its scales.
  l.m_.expert_stride_s = scales.defined()
                             ? l.scales_.nbytes() * static_cast<std::size_t>(l.m_.scale_step) /
                                   static_cast<std::size_t>(E)
                             : 0;
  return l;
}

std::optional<LinearWeight> LinearWeight::concat(Backend& be, std::string name,
                                                 std::span<const LinearWeight* const> parts) {
  if (parts.empty()) return std::nullopt;
  const LinearWeight& p0 = *parts[0];
  std::int64_t out = 0;
  for (const LinearWeight* p : parts) {
    if (!p->defined() || p->in() != p0.in() || p->quant_ != p0.quant_ ||
        p->weight_.dtype() != p0.weight_.dtype() ||
        p->scales_.defined() != p0.scales_.defined() ||
        (p->scales_.defined() && p->scales_.dtype() != p0.scales_.dtype()) ||
        p->biases_.defined() != p0.biases_.defined() ||
        p->bias_host_.defined() != p0.bias_host_.defined() || p->m_.expert_stride_w != 0)
      return std::nullopt;
    out += p->out();
  }
  auto stack = [&](Tensor LinearWeight::*member) -> Tensor {
    const Tensor& t0 = p0.*member;
    if (!t0.defined()) return Tensor();
    Shape shape = t0.shape();
    shape[0] = out;
    Tensor t = Tensor::empty(t0.dtype(), shape);
    std::size_t at = 0;
    for (const LinearWeight* p : parts) {
      const Tensor& src = p->*member;
      std::memcpy(static_cast<char*>(t.raw()) + at, src.raw(), src.nbytes());
      at += src.nbytes();
    }
    return t;
  };
  LinearWeight fused = upload(be, std::move(name), stack(&LinearWeight::weight_),
                              stack(&LinearWeight::scales_), stack(&LinearWeight::biases_),
                              p0.quant_, p0.in(), out, stack(&LinearWeight::bias_host_));
  for (const LinearWeight* p : parts)
    for (const Tensor* t : {&p->weight_, &p->scales_, &p->biases_}) page_out(*t);
  return fused;
}

OpSignature LinearWeight::signature(Op op, DType act) const {
  OpSignature s = sig(op, act);
  s.qmode = m_.mode;
  s.weight_dtype = quant_ ? m_.scales_dtype : m_.w_dtype;
  s.bits = m_.bits;
  s.group_size = m_.group_size;
  return s;
}

NormWeight NormWeight::upload(Backend& be, std::vector<float> weight, float eps) {
  NormWeight n;
  n.host_ = std::make_shared<const std::vector<float>>(std::move(weight));
  n.eps_ = eps;
  n.device_ = upload_floats(be, *n.host_, &n.data_);
  return n;
}

Rope Rope::upload(Backend& be, std::int64_t dims, bool traditional, float base, float scale,
                  float input_scale, std::vector<float> freqs) {
  Rope r;
  r.host_ = std::make_shared<const std::vector<float>>(std::move(freqs));
  r.t_.dims = dims;
  r.t_.traditional = traditional;
  r.t_.base = base;
  r.t_.scale = scale;
  r.t_.input_scale = input_scale;
  if (!r.host_->empty()) {
    r.t_.host_freqs = r.host_->data();
    r.device_ = upload_floats(be, *r.host_, &r.t_.freqs);
  }
  return r;
}

// --- Workspace ---

Act Workspace::carve(DType storage, std::int64_t rows, std::int64_t cols) {
  void* p = carve_bytes(static_cast<std::size_t>(rows * cols) * dtype_size(storage));
  return Act{p, storage, rows, cols, cols};
}

void* Workspace::carve_bytes(std::size_t bytes) {
  const std::size_t at = used_;
  used_ += (bytes + 255) / 256 * 256;
  if (!buf_ || used_ > capacity_) return nullptr;
  return static_cast<char*>(buf_->data()) + at;
}

void Workspace::commit(Backend& be) {
  if (used_ <= capacity_ && buf_) return;
  buf_.reset();
  buf_ = std::make_shared<DeviceBuffer>(be.allocate(MemoryKind::kWorkspace, used_));
  capacity_ = used_;
}

// --- Ops ---

void check_token_ids(const LinearWeight& table, const StepView& step) {
  for (std::int64_t i = 0; i < step.n_tokens; ++i) {
    const std::int32_t id = step.host_tokens[i];
    if (id < 0 || id >= table.out())
      throw_error(ErrorCategory::kBadInput, "token id " + std::to_string(id) +
                                                " is outside the vocabulary (0.." +
                                                std::to_string(table.out() - 1) + ")");
  }
}

void embed(const Exec& e, const LinearWeight& table, const StepView& step, Act out, float scale) {
  e.require(table.signature(Op::kEmbed, e.act()));
  MLXCEL_CHECK(out.rows == step.n_tokens && out.cols == table.in(), ErrorCategory::kInternal,
               "embed: output shape");
  check_token_ids(table, step);
  backend::EmbedArgs a;
  a.table = table.matrix();
  a.ids = step.tokens;
  a.host_ids = step.host_tokens;
  a.n = step.n_tokens;
  a.scale = scale;
  a.out = out;
  a.round = e.act();
  e.backend().embed(a);
}

void rms_norm(const Exec& e, Act x, const NormWeight& w, Act y) {
  e.require(sig(Op::kRmsNorm, e.act()));
  check_act(x, "rms_norm", "x");
  same_shape(x, y, "rms_norm");
  MLXCEL_CHECK(w.dim() == x.cols, ErrorCategory::kInternal, "rms_norm: weight size");
  e.backend().rms_norm({x, w.data(), w.eps(), y, e.act(), 1});
}

void add(const Exec& e, Act a, Act b, Act y) {
  e.require(sig(Op::kAdd, e.act()));
  same_shape(a, b, "add");
  same_shape(a, y, "add");
  e.backend().add({a, b, y, e.act()});
}

void add_rms_norm(const Exec& e, Act h, Act delta, const NormWeight& w, Act y) {
  same_shape(h, delta, "add_rms_norm");
  same_shape(h, y, "add_rms_norm");
  if (e.backend().supports(sig(Op::kAddRmsNorm, e.act()))) {
    e.backend().add_rms_norm({h, delta, w.data(), w.eps(), y, e.act()});
    return;
  }
  add(e, h, delta, h);  // the unfused twin
  rms_norm(e, h, w, y);
}

namespace {
backend::LinearArgs linear_args(const Exec& e, const LinearWeight& w, Act x, Act y) {
  e.require(w.signature(Op::kLinear, e.act()));
  check_act(x, "linear", "x");
  MLXCEL_CHECK(x.cols == w.in() && y.cols == w.out() && x.rows == y.rows, ErrorCategory::kInternal,
               "linear " + w.name() + ": x [" + std::to_string(x.rows) + ", " +
                   std::to_string(x.cols) + "] y [" + std::to_string(y.rows) + ", " +
                   std::to_string(y.cols) + "] for a [" + std::to_string(w.out()) + ", " +
                   std::to_string(w.in()) + "] weight");
  return {x, w.matrix(), w.bias(), y, e.act()};
}
}  // namespace

void linear(const Exec& e, const LinearWeight& w, Act x, Act y) {
  e.backend().linear(linear_args(e, w, x, y));
}

namespace {
backend::LinearArgs norm_linear_args(const Exec& e, const NormWeight& norm, Act src, Act x,
                                     const LinearWeight& w, Act y) {
  e.require(sig(Op::kRmsNorm, e.act()));
  check_act(src, "norm_linear", "src");
  same_shape(src, x, "norm_linear");
  MLXCEL_CHECK(norm.dim() == src.cols, ErrorCategory::kInternal, "norm_linear: weight size");
  backend::LinearArgs a = linear_args(e, w, x, y);
  a.norm_weight = norm.data();
  a.norm_eps = norm.eps();
  a.norm_src = src;
  return a;
}
}  // namespace

void norm_linear(const Exec& e, const NormWeight& norm, Act src, Act x, const LinearWeight& w,
                 Act y) {
  e.backend().linear(norm_linear_args(e, norm, src, x, w, y));
}

void linear_add(const Exec& e, const LinearWeight& w, Act x, Act h) {
  e.require(sig(Op::kAdd, e.act()));
  backend::LinearArgs a = linear_args(e, w, x, h);
  a.accumulate = true;
  e.backend().linear(a);
}

void gated_linear_add(const Exec& e, Activation act, Act gu, Act x, const LinearWeight& w,
                      Act h) {
  e.require(sig(Op::kAdd, e.act()));
  e.require(sig(Op::kGatedActivation, e.act()));
  check_act(gu, "gated_linear_add", "gu");
  MLXCEL_CHECK(gu.rows == x.rows && gu.cols == 2 * x.cols, ErrorCategory::kInternal,
               "gated_linear_add: gu must be [T, 2K] for x [T, K]");
  backend::LinearArgs a = linear_args(e, w, x, h);
  a.accumulate = true;
  a.gated_in = true;
  a.gated_act = act;
  a.gated_src = gu;
  e.backend().linear(a);
}

void rope_kv_append(const Exec& e, Act q, Act k, Act v, int n_heads, int n_kv_heads, int head_dim,
                    const Rope& rope, const KvLayout& kv, int layer, const StepView& step,
                    const NormWeight* q_norm, const NormWeight* k_norm) {
  e.require(sig(Op::kRopeKvAppend, e.act(), head_dim));
  MLXCEL_CHECK((q_norm == nullptr) == (k_norm == nullptr) &&
                   (!q_norm || (q_norm->dim() == head_dim && k_norm->dim() == head_dim)),
               ErrorCategory::kInternal, "rope_kv_append: qk-norm weights must both be [head_dim]");
  MLXCEL_CHECK(q.rows == step.n_tokens && k.rows == step.n_tokens && v.rows == step.n_tokens &&
                   q.cols == static_cast<std::int64_t>(n_heads) * head_dim &&
                   k.cols == static_cast<std::int64_t>(n_kv_heads) * head_dim &&
                   kv.n_kv_heads == n_kv_heads && kv.head_dim == head_dim && layer < kv.n_layers,
               ErrorCategory::kInternal, "rope_kv_append: shapes");
  backend::RopeKvAppendArgs a;
  a.q = q;
  a.k = k;
  a.v = v;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.rope = rope.table();
  a.kv = kv;
  a.layer = layer;
  a.step = step;
  a.round = e.act();
  if (q_norm) {
    a.q_norm = q_norm->data();
    a.k_norm = k_norm->data();
    a.q_norm_eps = q_norm->eps();
    a.k_norm_eps = k_norm->eps();
  }
  e.backend().rope_kv_append(a);
}

void attention(const Exec& e, Act q, int n_heads, const KvLayout& kv, int layer,
               std::int64_t window, float scale, const StepView& step, Act out) {
  e.require(sig(Op::kAttention, e.act(), kv.head_dim));
  MLXCEL_CHECK(n_heads % kv.n_kv_heads == 0, ErrorCategory::kInternal,
               "attention: query heads not a multiple of KV heads");
  MLXCEL_CHECK(q.rows == step.n_tokens && out.rows == step.n_tokens &&
                   out.cols == static_cast<std::int64_t>(n_heads) * kv.v_dim,
               ErrorCategory::kInternal, "attention: shapes");
  backend::AttentionArgs a;
  a.q = q;
  a.n_heads = n_heads;
  a.kv = kv;
  a.layer = layer;
  a.window = window;
  a.scale = scale;
  a.step = step;
  a.out = out;
  a.round = e.act();
  e.backend().attention(a);
}

void gated_activation(const Exec& e, Activation act, Act g, Act u, Act out) {
  e.require(sig(Op::kGatedActivation, e.act()));
  same_shape(g, u, "gated_activation");
  same_shape(g, out, "gated_activation");
  e.backend().gated_activation({act, g, u, out, e.act()});
}

void moe(const Exec& e, const LinearWeight& router, const LinearWeight& gate,
         const LinearWeight& up, const LinearWeight& down, int top_k, bool norm_topk_prob,
         Act x, Act gates, std::int32_t* experts, float* weights, Act out,
         const MoeFusion& fusion) {
  e.require(sig(Op::kMoeRoute, e.act()));
  e.require(gate.signature(Op::kMoeExperts, e.act()));
  MLXCEL_CHECK(top_k > 0 && top_k <= router.out(), ErrorCategory::kInternal, "moe: top_k");
  // The router's product goes to the backend with the routing (one decode kernel on a GPU).
  backend::MoeRouteArgs r;
  r.with_router = true;
  r.router = fusion.norm ? norm_linear_args(e, *fusion.norm, fusion.norm_src, x, router, gates)
                         : linear_args(e, router, x, gates);
  r.gates = gates;
  r.top_k = top_k;
  r.norm_topk_prob = norm_topk_prob;
  r.experts = experts;
  r.weights = weights;
  r.round = e.act();
  e.backend().moe_route(r);
  backend::MoeExpertsArgs a;
  a.x = x;
  a.gate = gate.matrix();
  a.up = up.matrix();
  a.down = down.matrix();
  a.num_experts = router.out();
  a.act = Activation::kSilu;
  a.top_k = top_k;
  a.experts = experts;
  a.weights = weights;
  a.out = out;
  a.round = e.act();
  a.accumulate = fusion.accumulate;
  e.backend().moe_experts(a);
}

void gather_rows(const Exec& e, Act src, const std::int32_t* rows, const std::int32_t* host_rows,
                 std::int64_t n, Act dst) {
  e.require(sig(Op::kGatherRows, e.act()));
  MLXCEL_CHECK(dst.rows == n && dst.cols == src.cols, ErrorCategory::kInternal, "gather_rows: shapes");
  for (std::int64_t i = 0; i < n; ++i)
    MLXCEL_CHECK(host_rows[i] >= 0 && host_rows[i] < src.rows, ErrorCategory::kInternal,
                 "gather_rows: row out of range");
  e.backend().gather_rows({src, rows, host_rows, n, dst});
}

void to_host(const Exec& e, Act a, float* dst) {
  const std::size_t es = dtype_size(a.dtype);
  std::vector<char> tmp(static_cast<std::size_t>(a.cols) * es);
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const char* src = static_cast<const char*>(a.data) + static_cast<std::size_t>(r * a.stride) * es;
    if (a.dtype == DType::kF32) {
      e.backend().copy(dst + r * a.cols, src, tmp.size(), backend::CopyKind::kDeviceToHost);
      continue;
    }
    e.backend().copy(tmp.data(), src, tmp.size(), backend::CopyKind::kDeviceToHost);
    for (std::int64_t c = 0; c < a.cols; ++c) {
      dst[r * a.cols + c] = a.dtype == DType::kBF16
                                ? reinterpret_cast<const bf16*>(tmp.data())[c].to_float()
                                : reinterpret_cast<const f16*>(tmp.data())[c].to_float();
    }
  }
}

}  // namespace mlxcel::ops
