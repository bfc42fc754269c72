#pragma once
// A Linear layer as mlx-lm stores it: dense weight [out, in] (F32/F16/BF16) or an MLX-quantized
// triplet (weight U32, scales, biases for affine), plus an optional float bias [out]. Activations
// are fp32 rows; y[M, out] = x[M, in] · Wᵀ (+ bias).
#include <cstdint>
#include <optional>
#include <string>

#include "core/tensor.h"
#include "models/model.h"
#include "models/weights.h"
#include "quant/quant_params.h"

namespace mlxcel::models {

class Linear {
 public:
  Linear() = default;
  // Loads `<module>.weight` (+ scales/biases when quantized, + `.bias` when `bias`), checking
  // the shapes against [out, in]; throws bad_input naming the tensor on a mismatch.
  static Linear load(const WeightSource& w, const std::string& module, std::int64_t in,
                     std::int64_t out, bool bias);
  // Same, for an Embedding table [vocab, dim] (quantized tables keep their own params).
  static Linear load_embedding(const WeightSource& w, const std::string& module,
                               std::int64_t vocab, std::int64_t dim);

  // From already-loaded tensors (an expert slice of a stacked SwitchLinear, say).
  static Linear from_tensors(std::string name, Tensor weight, Tensor scales, Tensor biases,
                             std::optional<QuantParams> quant, std::int64_t in, std::int64_t out);

  // `act` is the activation dtype x holds; with Numerics::kMlx a quantized layer reproduces
  // MLX's CPU accumulation in that dtype (otherwise fp32).
  void forward(const float* x, std::int64_t m, float* y, Numerics numerics = Numerics::kFast,
               DType act = DType::kF32) const;
  // Rows of the table (embedding lookup), dequantized exactly like mx.dequantize then widened.
  void gather_rows(const std::int32_t* ids, std::int64_t n, float* out) const;

  std::int64_t in() const { return in_; }
  std::int64_t out() const { return out_; }
  bool quantized() const { return quant_.has_value(); }
  const std::optional<QuantParams>& quant() const { return quant_; }
  std::size_t weight_bytes() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  std::int64_t in_ = 0, out_ = 0;
  Tensor weight_, scales_, biases_, bias_;
  std::optional<QuantParams> quant_;
};

}  // namespace mlxcel::models
