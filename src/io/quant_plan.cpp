#include "io/quant_plan.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "quant/fp8_block.h"
#include "quant/packing.h"

namespace mlxcel {

std::string_view quant_origin_name(QuantOrigin o) {
  switch (o) {
    case QuantOrigin::kOverride: return "override";
    case QuantOrigin::kDefault: return "default";
    case QuantOrigin::kInferred: return "inferred";
    case QuantOrigin::kFp8Block: return "fp8-block";
    case QuantOrigin::kAwq: return "awq";
  }
  return "?";
}

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

bool byte_scales(DType t) { return t == DType::kU8 || t == DType::kF8E8M0 || t == DType::kF8E4M3; }

// Shapes and scale dtype class agree with `p` (affine keeps float scales, the fp modes U8).
bool shapes_fit(const TensorEntry& w, const TensorEntry& s, const QuantParams& p) {
  if (w.shape.empty() || s.shape.empty()) return false;
  if ((p.mode == QuantMode::kAffine) == byte_scales(s.dtype)) return false;
  const std::int64_t wk = w.shape.back() * 32;
  return wk % p.bits == 0 && wk / p.bits == s.shape.back() * p.group_size;
}

// mlx-lm's infer_quant_config, without the module: U8 scales fix the fp mode by the ratio of
// the packed widths; affine keeps the top-level group size (else its bits) and solves for the other.
std::optional<QuantParams> infer_params(const TensorEntry& w, const TensorEntry& s, const QuantParams& top) {
  if (w.shape.empty() || s.shape.empty() || s.shape.back() == 0) return std::nullopt;
  const std::int64_t wl = w.shape.back(), sl = s.shape.back();
  if (byte_scales(s.dtype)) {
    for (QuantMode m : {QuantMode::kNvfp4, QuantMode::kMxfp4, QuantMode::kMxfp8}) {
      QuantParams p = default_params(m);
      if (shapes_fit(w, s, p)) return p;
    }
    return std::nullopt;
  }
  QuantParams p{QuantMode::kAffine, 0, top.group_size};
  if ((wl * 32) % (sl * p.group_size) == 0) {
    p.bits = static_cast<int>(wl * 32 / (sl * p.group_size));
    if (params_valid(p)) return p;
  }
  p = {QuantMode::kAffine, top.bits, 0};
  if ((wl * 32) % (sl * p.bits) == 0) {
    p.group_size = static_cast<int>(wl * 32 / (sl * p.bits));
    if (params_valid(p)) return p;
  }
  return std::nullopt;
}

std::string module_of(const std::string& name, const std::string& suffix) {
  return name.substr(0, name.size() - suffix.size());
}

}  // namespace

QuantPlan plan_quantization(const Checkpoint& ckpt, const ModelConfig& cfg, bool check_scale_values) {
  QuantPlan plan;
  plan.total_bytes = ckpt.total_bytes();
  const QuantConfig& qc = cfg.quant();
  std::set<std::string> used;
  const std::vector<std::string> names = ckpt.names();
  auto add_bytes = [&](QuantizedModule& m, const std::string& n) {
    if (!ckpt.has(n)) return;
    m.bytes += ckpt.entry(n).nbytes();
    used.insert(n);
  };

  for (const std::string& n : names) {
    if (qc.foreign == ForeignQuant::kFp8Block && ends_with(n, ".weight_scale_inv")) {
      const std::string p = module_of(n, ".weight_scale_inv");
      const std::string wn = p + ".weight";
      if (!ckpt.has(wn)) throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": " + n + " has no " + wn);
      const TensorEntry& we = ckpt.entry(wn);
      if (we.dtype != DType::kF8E4M3) continue;  // already dense; the scale is unused
      QuantizedModule m;
      m.path = p;
      m.origin = QuantOrigin::kFp8Block;
      m.params = default_params(QuantMode::kMxfp8);
      m.shape = we.shape;
      m.fp8_block = qc.fp8_block;
      check_fp8_block(ckpt.tensor(wn), ckpt.tensor(n), qc.fp8_block, wn);
      add_bytes(m, wn);
      add_bytes(m, n);
      plan.modules.push_back(std::move(m));
      continue;
    }
    if (qc.foreign == ForeignQuant::kAwq && ends_with(n, ".qweight")) {
      const std::string p = module_of(n, ".qweight");
      if (ckpt.has(p + ".g_idx")) {
        throw_error(ErrorCategory::kUnsupported, ckpt.dir() + ": " + p +
                                                     ".g_idx: non-contiguous group indices are not supported "
                                                     "(as in mlx-lm); use a model without g_idx or re-quantize "
                                                     "with mlx_lm.convert");
      }
      if (!ckpt.has(p + ".scales")) throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": " + n + " has no " + p + ".scales");
      QuantizedModule m;
      m.path = p;
      m.origin = QuantOrigin::kAwq;
      m.params = qc.defaults;
      const TensorEntry& qe = ckpt.entry(n);
      if (qe.shape.size() != 2) throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": " + n + " must be 2-D");
      m.shape = {qe.shape[1] * 8, qe.shape[0]};
      add_bytes(m, n);
      add_bytes(m, p + ".scales");
      add_bytes(m, p + ".qzeros");
      plan.modules.push_back(std::move(m));
      continue;
    }
    if (!ends_with(n, ".scales") || qc.foreign == ForeignQuant::kAwq) continue;
    const std::string p = module_of(n, ".scales");
    const std::string wn = p + ".weight", bn = p + ".biases";
    std::optional<QuantParams> qp = cfg.quant_params_for(p, true);
    if (!qc.present) {
      throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": " + n +
                                                " exists but config.json declares no quantization; add the "
                                                "\"quantization\" section mlx_lm.convert writes");
    }
    if (!qp) {
      throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": config.json marks " + p +
                                                " as not quantized (false) but the checkpoint holds " + n);
    }
    if (!ckpt.has(wn)) throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": " + n + " has no " + wn);
    const TensorEntry& we = ckpt.entry(wn);
    const TensorEntry& se = ckpt.entry(n);
    QuantizedModule m;
    m.path = p;
    m.params = *qp;
    m.origin = cfg.has_override(p) ? QuantOrigin::kOverride : QuantOrigin::kDefault;
    if (!shapes_fit(we, se, m.params) && m.origin == QuantOrigin::kDefault) {
      if (auto inf = infer_params(we, se, qc.defaults)) {
        LOG_INFO(p << ": shapes do not fit the top-level " << m.params.str() << "; using " << inf->str()
                   << " recovered from the tensor shapes, as mlx-lm does");
        m.params = *inf;
        m.origin = QuantOrigin::kInferred;
      }
    }
    const Tensor w = ckpt.tensor(wn), s = ckpt.tensor(n);
    Tensor b;
    if (ckpt.has(bn)) b = ckpt.tensor(bn);
    if (m.params.mode != QuantMode::kAffine && b.defined()) {
      throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": " + p + " is " + m.params.str() +
                                                " (no biases) but the checkpoint holds " + bn);
    }
    check_quantized_shapes(w, s, b.defined() ? &b : nullptr, m.params, ckpt.dir() + ": " + p);
    if (check_scale_values) check_scales(s, b.defined() ? &b : nullptr, m.params, ckpt.dir() + ": " + p);
    m.shape = w.shape();
    m.shape.back() = unpacked_dim(w.dim(-1), m.params.bits);
    m.global_scale = ckpt.has(p + ".global_scale");
    add_bytes(m, wn);
    add_bytes(m, n);
    add_bytes(m, bn);
    add_bytes(m, p + ".global_scale");
    plan.modules.push_back(std::move(m));
  }
  // Per-module config entries that name a quantized module the checkpoint lacks.
  for (const auto& [path, p] : qc.overrides) {
    if (!p) continue;
    if (ckpt.has(path + ".weight") && !ckpt.has(path + ".scales")) {
      throw_error(ErrorCategory::kBadInput, ckpt.dir() + ": config.json quantizes " + path + " (" + p->str() +
                                                ") but the checkpoint has no " + path + ".scales");
    }
  }
  std::sort(plan.modules.begin(), plan.modules.end(),
            [](const QuantizedModule& a, const QuantizedModule& b) { return a.path < b.path; });
  for (const auto& m : plan.modules) plan.quantized_bytes += m.bytes;
  plan.dense_tensors = names.size() - used.size();
  return plan;
}

QuantizedTensor repack_awq(const Tensor& qweight_in, const Tensor& scales_in, const Tensor* qzeros_in, int gs,
                           const std::string& what) {
  auto fail = [&](const std::string& s) { throw_error(ErrorCategory::kBadInput, what + ": " + s); };
  if (qweight_in.ndim() != 2 || (qweight_in.dtype() != DType::kI32 && qweight_in.dtype() != DType::kU32)) {
    fail("qweight must be a 2-D I32 tensor, got " + std::string(dtype_name(qweight_in.dtype())) + " " +
         qweight_in.shape_str());
  }
  const Tensor qw = qweight_in.contiguous(), sc = scales_in.contiguous();
  const std::int64_t in = qw.dim(0), out = qw.dim(1) * 8;
  if (gs <= 0 || in % gs != 0 || in % 32 != 0) fail("input dim " + std::to_string(in) + " is not a multiple of the group size");
  const std::int64_t groups = in / gs;
  if (sc.ndim() != 2 || sc.dim(0) != groups || sc.dim(1) != out ||
      (sc.dtype() != DType::kF16 && sc.dtype() != DType::kBF16 && sc.dtype() != DType::kF32)) {
    fail("scales " + sc.shape_str() + " must be float [" + std::to_string(groups) + ", " + std::to_string(out) + "]");
  }
  Tensor qz;
  if (qzeros_in) {
    qz = qzeros_in->contiguous();
    if (qz.ndim() != 2 || qz.dim(0) != groups || qz.dim(1) * 8 != out || dtype_size(qz.dtype()) != 4) {
      fail("qzeros " + qz.shape_str() + " must be I32 [" + std::to_string(groups) + ", " + std::to_string(out / 8) + "]");
    }
  }
  static const int kOrder[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  auto nib = [&](const std::uint32_t* words, std::int64_t row_words, std::int64_t r, std::int64_t c) {
    return (words[r * row_words + c / 8] >> (kOrder[c % 8] * 4)) & 0xFu;
  };
  QuantizedTensor t;
  t.weight = Tensor::empty(DType::kU32, {out, in / 8});
  t.scales = Tensor::empty(sc.dtype(), {out, groups});
  t.biases = Tensor::empty(sc.dtype(), {out, groups});
  const auto* qwp = static_cast<const std::uint32_t*>(qw.raw());
  auto* dst = static_cast<std::uint8_t*>(t.weight.raw());
  for (std::int64_t o = 0; o < out; ++o) {
    std::uint8_t* row = dst + o * (in / 2);
    for (std::int64_t i = 0; i < in; ++i) quant::put_code(row, i, 4, nib(qwp, qw.dim(1), i, o));
    for (std::int64_t g = 0; g < groups; ++g) {
      const float s = quant::load_float(sc.raw(), sc.dtype(), g * out + o);
      const float z = qzeros_in ? static_cast<float>(nib(static_cast<const std::uint32_t*>(qz.raw()), qz.dim(1), g, o)) : 8.0f;
      quant::store_float(t.scales.raw(), sc.dtype(), o * groups + g, s);
      quant::store_float(t.biases.raw(), sc.dtype(), o * groups + g, -z * s);
    }
  }
  return t;
}

LoadedQuantized load_quantized(const Checkpoint& ckpt, const QuantizedModule& m, BackendKind backend) {
  LoadedQuantized out;
  const std::string& p = m.path;
  QuantParams stored = m.params;
  if (m.origin == QuantOrigin::kFp8Block) {
    out.tensors = requantize_fp8_block_to_mxfp8(ckpt.tensor(p + ".weight"), ckpt.tensor(p + ".weight_scale_inv"),
                                                m.fp8_block, p);
    LOG_INFO(p << ": HF FP8 block weight dequantized exactly and re-quantized to mxfp8 at load");
  } else if (m.origin == QuantOrigin::kAwq) {
    Tensor qz;
    if (ckpt.has(p + ".qzeros")) qz = ckpt.tensor(p + ".qzeros");
    out.tensors = repack_awq(ckpt.tensor(p + ".qweight"), ckpt.tensor(p + ".scales"), qz.defined() ? &qz : nullptr,
                             stored.group_size, p);
  } else {
    out.tensors.weight = ckpt.tensor(p + ".weight");
    out.tensors.scales = ckpt.tensor(p + ".scales");
    if (ckpt.has(p + ".biases")) out.tensors.biases = ckpt.tensor(p + ".biases");
    if (m.global_scale) {
      Tensor g = ckpt.tensor(p + ".global_scale");
      MLXCEL_CHECK(g.numel() == 1 && g.dtype() == DType::kF32, ErrorCategory::kBadInput,
                   ckpt.dir() + ": " + p + ".global_scale must be one F32 value");
      out.global_scale = g.data<float>()[0];
    }
  }
  out.route = route_or_throw(backend, stored, p + ".weight");
  out.params = stored;
  if (out.route.kind == RouteKind::kConvert) {
    MLXCEL_CHECK(!out.global_scale, ErrorCategory::kUnsupported,
                 p + ": nvfp4 with a global_scale cannot be converted for backend " + std::string(backend_name(backend)) +
                     "; run with --backend cpu");
    const Tensor* b = out.tensors.biases.defined() ? &out.tensors.biases : nullptr;
    out.tensors = convert_weight(out.tensors.weight, out.tensors.scales, b, stored, out.route.target);
    out.params = out.route.target;
    LOG_INFO(p << ": " << stored.str() << " has no " << backend_name(backend) << " kernel; converted to "
               << out.route.target.str() << (out.route.lossless ? " (exact)" : " (re-quantized)"));
  }
  return out;
}

}  // namespace mlxcel
