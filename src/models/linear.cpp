#include "models/linear.h"

#include "core/error.h"
#include "quant/quant_params.h"
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

ops::LinearWeight load_linear(const ops::Exec& e, const WeightSource& w, const std::string& module,
                              std::int64_t in, std::int64_t out, bool bias) {
  Tensor weight = w.get(module + ".weight").contiguous(), scales, biases, b;
  const auto quant = w.quant_for(module);
  const std::string want = "[" + std::to_string(out) + ", " + std::to_string(in) + "]";
  if (quant) {
    scales = w.get(module + ".scales").contiguous();
    if (has_biases(quant->mode)) biases = w.get(module + ".biases").contiguous();
    check_quantized_shapes(weight, scales, biases.defined() ? &biases : nullptr, *quant, module);
    if (weight.ndim() != 2 || weight.dim(0) != out || unpacked_dim(weight.dim(1), quant->bits) != in)
      shape_error(w, module + ".weight", weight, want + " packed as " + quant->str());
    check_scales(scales, biases.defined() ? &biases : nullptr, *quant, module);
  } else {
    if (!is_float(weight.dtype()))
      throw_error(ErrorCategory::kBadInput,
                  w.describe() + ": tensor '" + module + ".weight' is " +
                      std::string(dtype_name(weight.dtype())) +
                      " but config.json does not mark it quantized (no '" + module +
                      ".scales' and no quantization entry)");
    if (weight.shape() != Shape{out, in}) shape_error(w, module + ".weight", weight, want);
  }
  if (bias) {
    b = w.get(module + ".bias");
    if (b.shape() != Shape{out}) shape_error(w, module + ".bias", b, "[" + std::to_string(out) + "]");
  }
  return ops::LinearWeight::upload(e.backend(), module, weight, scales, biases, quant, in, out, b);
}

ops::LinearWeight load_stacked(const ops::Exec& e, const WeightSource& w, const std::string& module,
                               std::int64_t experts, std::int64_t in, std::int64_t out) {
  Tensor weight = w.get(module + ".weight").contiguous(), scales, biases;
  const auto quant = w.quant_for(module);
  if (quant) {
    scales = w.get(module + ".scales").contiguous();
    if (has_biases(quant->mode)) biases = w.get(module + ".biases").contiguous();
    check_quantized_shapes(weight, scales, biases.defined() ? &biases : nullptr, *quant, module);
    check_scales(scales, biases.defined() ? &biases : nullptr, *quant, module);
  }
  const std::int64_t packed_in = quant ? in * quant->bits / 32 : in;
  if (weight.shape() != Shape{experts, out, packed_in})
    throw_error(ErrorCategory::kBadInput,
                w.describe() + ": tensor '" + module + ".weight' has shape " + weight.shape_str() +
                    ", expected [" + std::to_string(experts) + ", " + std::to_string(out) + ", " +
                    std::to_string(packed_in) + "] (stacked experts)");
  return ops::LinearWeight::upload_stacked(e.backend(), module, weight, scales, biases, quant, in,
                                           out);
}

ops::NormWeight load_norm(const ops::Exec& e, const WeightSource& w, const std::string& name,
                          std::int64_t dim, float eps, bool plus_one) {
  Tensor t = w.get(name);
  if (t.shape() != Shape{dim})
    throw_error(ErrorCategory::kBadInput, w.describe() + ": tensor '" + name + "' has shape " +
                                              t.shape_str() + ", expected [" +
                                              std::to_string(dim) + "]");
  std::vector<float> v = t.to_f32();
  if (plus_one)
    for (auto& x : v) x = quant::round_to(t.dtype(), 1.0f + x);
  return ops::NormWeight::upload(e.backend(), std::move(v), eps);
}

}  // namespace mlxcel::models
