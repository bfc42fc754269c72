#include "models/linear.h"

#include <cstring>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/qmatmul.h"
#include "backend/cpu/mlx_matmul.h"
#include "core/error.h"
#include "quant/packing.h"
#include "quant/qmm.h"
#include "quant/quantize.h"

namespace mlxcel::models {
namespace {

[[noreturn]] void shape_error(const WeightSource& w, const std::string& name, const Tensor& t,
                              const std::string& want) {
  throw_error(ErrorCategory::kBadInput,
              w.describe() + ": tensor '" + name + "' has shape " + t.shape_str() + " (" +
                  std::string(dtype_name(t.dtype())) + "), expected " + want +
                  " from config.json; the weights do not match the config");
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

}  // namespace

Linear Linear::load(const WeightSource& w, const std::string& module, std::int64_t in,
                    std::int64_t out, bool bias) {
  Linear l;
  l.name_ = module;
  l.in_ = in;
  l.out_ = out;
  l.weight_ = w.get(module + ".weight").contiguous();
  l.quant_ = w.quant_for(module);
  const std::string want = "[" + std::to_string(out) + ", " + std::to_string(in) + "]";
  if (l.quant_) {
    l.scales_ = w.get(module + ".scales").contiguous();
    if (has_biases(l.quant_->mode)) l.biases_ = w.get(module + ".biases").contiguous();
    check_quantized_shapes(l.weight_, l.scales_, l.biases_.defined() ? &l.biases_ : nullptr,
                           *l.quant_, module);
    if (l.weight_.ndim() != 2 || l.weight_.dim(0) != out ||
        unpacked_dim(l.weight_.dim(1), l.quant_->bits) != in)
      shape_error(w, module + ".weight", l.weight_, want + " packed as " + l.quant_->str());
    check_scales(l.scales_, l.biases_.defined() ? &l.biases_ : nullptr, *l.quant_, module);
  } else {
    if (!is_float(l.weight_.dtype()))
      throw_error(ErrorCategory::kBadInput,
                  w.describe() + ": tensor '" + module + ".weight' is " +
                      std::string(dtype_name(l.weight_.dtype())) +
                      " but config.json does not mark it quantized (no '" + module +
                      ".scales' and no quantization entry)");
    if (l.weight_.shape() != Shape{out, in}) shape_error(w, module + ".weight", l.weight_, want);
  }
  if (bias) {
    l.bias_ = w.get(module + ".bias");
    if (l.bias_.shape() != Shape{out}) shape_error(w, module + ".bias", l.bias_, "[" + std::to_string(out) + "]");
  }
  return l;
}

Linear Linear::load_embedding(const WeightSource& w, const std::string& module,
                              std::int64_t vocab, std::int64_t dim) {
  return load(w, module, dim, vocab, false);
}

Linear Linear::from_tensors(std::string name, Tensor weight, Tensor scales, Tensor biases,
                            std::optional<QuantParams> quant, std::int64_t in, std::int64_t out) {
  Linear l;
  l.name_ = std::move(name);
  l.in_ = in;
  l.out_ = out;
  l.weight_ = std::move(weight);
  l.scales_ = std::move(scales);
  l.biases_ = std::move(biases);
  l.quant_ = quant;
  return l;
}

std::size_t Linear::weight_bytes() const {
  std::size_t b = weight_.nbytes();
  if (scales_.defined()) b += scales_.nbytes();
  if (biases_.defined()) b += biases_.nbytes();
  if (bias_.defined()) b += bias_.nbytes();
  return b;
}

void Linear::forward(const float* x, std::int64_t m, float* y, Numerics numerics,
                     DType act) const {
  if (m <= 0 || out_ == 0) return;
  std::vector<float> bias32;
  if (bias_.defined()) bias32 = bias_.to_f32();
  if (quant_) {
    cpu::QWeight q;
    q.w = static_cast<const std::uint32_t*>(weight_.raw());
    q.scales = scales_.raw();
    q.scales_dtype = scales_.dtype();
    q.biases = biases_.defined() ? biases_.raw() : nullptr;
    q.mode = static_cast<cpu::QMode>(quant_->mode);
    q.bits = quant_->bits;
    q.group_size = quant_->group_size;
    q.n = out_;
    q.k = in_;
    if (numerics == Numerics::kMlx) {
      // MLX adds the bias as a separate op on the T-valued product; the caller rounds.
      cpu::qmatmul_mlx(q, x, m, act, y);
      if (!bias32.empty())
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t n = 0; n < out_; ++n) y[i * out_ + n] += bias32[n];
      return;
    }
    cpu::qmatmul(q, x, m, bias32.empty() ? nullptr : bias32.data(), y);
    return;
  }
  if (numerics == Numerics::kMlx) {
    cpu::matmul_mlx(x, m, weight_.raw(), weight_.dtype(), out_, in_, y);
    if (!bias32.empty())
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t n = 0; n < out_; ++n) y[i * out_ + n] += bias32[n];
    return;
  }
  cpu::MatmulArgs a;
  a.x = x;
  a.x_dtype = DType::kF32;
  a.w = weight_.raw();
  a.w_dtype = weight_.dtype();
  a.y = y;
  a.y_dtype = DType::kF32;
  a.m = m;
  a.n = out_;
  a.k = in_;
  cpu::matmul(a);
  if (!bias32.empty())
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t n = 0; n < out_; ++n) y[i * out_ + n] += bias32[n];
}

void Linear::gather_rows(const std::int32_t* ids, std::int64_t n, float* out) const {
  for (std::int64_t i = 0; i < n; ++i) {
    std::int32_t id = ids[i];
    if (id < 0 || id >= out_)
      throw_error(ErrorCategory::kBadInput, "token id " + std::to_string(id) +
                                                " is outside the vocabulary (0.." +
                                                std::to_string(out_ - 1) + ")");
    float* o = out + i * in_;
    if (quant_ && quant_->mode == QuantMode::kAffine) {
      // mx.dequantize (QuantizedEmbedding) computes scale * q and then + bias in the scales
      // dtype, rounding after each.
      const DType t = scales_.dtype();
      const std::int64_t groups = in_ / quant_->group_size;
      const auto* row = static_cast<const std::uint8_t*>(weight_.raw()) + id * (in_ * quant_->bits / 8);
      for (std::int64_t k = 0; k < in_; ++k) {
        const std::int64_t g = id * groups + k / quant_->group_size;
        const float sc = quant::load_float(scales_.raw(), t, g), b = quant::load_float(biases_.raw(), t, g);
        const float q = static_cast<float>(quant::get_code(row, k, quant_->bits));
        o[k] = quant::round_to(t, quant::round_to(t, sc * q) + b);
      }
    } else if (quant_) {
      quant::decode_row_f32(weight_, scales_, biases_.defined() ? &biases_ : nullptr, *quant_, id, o);
    } else {
      for (std::int64_t k = 0; k < in_; ++k)
        o[k] = quant::load_float(weight_.raw(), weight_.dtype(), id * in_ + k);
    }
  }
}

}  // namespace mlxcel::models
