#include "quant/fp8_block.h"

#include <cmath>

#include "core/error.h"

namespace mlxcel {

void check_fp8_block(const Tensor& weight, const Tensor& scale_inv, Fp8Block block, const std::string& what) {
  auto fail = [&](const std::string& s) {
    throw_error(ErrorCategory::kBadInput, what + ": " + s +
                                              "; the FP8 checkpoint is inconsistent with its config.json "
                                              "weight_block_size");
  };
  if (weight.dtype() != DType::kF8E4M3 && weight.dtype() != DType::kU8) {
    fail("weight must be F8_E4M3, got " + std::string(dtype_name(weight.dtype())));
  }
  if (weight.ndim() != 2) fail("weight must be 2-D, got " + weight.shape_str());
  if (block.rows <= 0 || block.cols <= 0) fail("block size must be positive");
  if (scale_inv.dtype() != DType::kF32 && scale_inv.dtype() != DType::kBF16 && scale_inv.dtype() != DType::kF16) {
    fail("weight_scale_inv must be F32, BF16 or F16, got " + std::string(dtype_name(scale_inv.dtype())));
  }
  const std::int64_t br = (weight.dim(0) + block.rows - 1) / block.rows;
  const std::int64_t bc = (weight.dim(1) + block.cols - 1) / block.cols;
  if (scale_inv.ndim() != 2 || scale_inv.dim(0) != br || scale_inv.dim(1) != bc) {
    fail("weight_scale_inv " + scale_inv.shape_str() + " does not match weight " + weight.shape_str() +
         " with " + std::to_string(block.rows) + "x" + std::to_string(block.cols) + " blocks (want [" +
         std::to_string(br) + ", " + std::to_string(bc) + "])");
  }
}

namespace {
Tensor dequantize_f32(const Tensor& weight_in, const Tensor& scale_in, Fp8Block block, const std::string& what) {
  check_fp8_block(weight_in, scale_in, block, what);
  const Tensor weight = weight_in.contiguous(), scale = scale_in.contiguous();
  const std::int64_t R = weight.dim(0), C = weight.dim(1), bc = scale.dim(1);
  Tensor out = Tensor::empty(DType::kF32, {R, C});
  const auto* q = static_cast<const std::uint8_t*>(weight.raw());
  float* o = out.data<float>();
  for (std::int64_t i = 0; i < R; ++i) {
    for (std::int64_t j = 0; j < C; ++j) {
      const float s = quant::load_float(scale.raw(), scale.dtype(), (i / block.rows) * bc + j / block.cols);
      if (!std::isfinite(s)) {
        throw_error(ErrorCategory::kBadInput, what + ": weight_scale_inv holds a non-finite value at block (" +
                                                  std::to_string(i / block.rows) + ", " +
                                                  std::to_string(j / block.cols) +
                                                  "); the checkpoint is corrupt: re-download it");
      }
      // E4M3 0x7F/0xFF are NaN in mx.from_fp8; mlxcel reads them as 0 (no NaN enters the model).
      const std::uint8_t b = q[i * C + j];
      o[i * C + j] = (b & 0x7F) == 0x7F ? 0.0f : fp8_e4m3_to_float(b) * s;
    }
  }
  return out;
}
}  // namespace

Tensor dequantize_fp8_block(const Tensor& weight, const Tensor& scale_inv, Fp8Block block, DType out_dtype,
                            const std::string& what) {
  Tensor f = dequantize_f32(weight, scale_inv, block, what);
  if (out_dtype == DType::kF32) return f;
  Tensor out = Tensor::empty(out_dtype, f.shape());
  for (std::int64_t i = 0; i < f.numel(); ++i) quant::store_float(out.raw(), out_dtype, i, f.data<float>()[i]);
  return out;
}

QuantizedTensor requantize_fp8_block_to_mxfp8(const Tensor& weight, const Tensor& scale_inv, Fp8Block block,
                                              const std::string& what) {
  MLXCEL_CHECK(weight.ndim() == 2 && weight.dim(1) % 32 == 0, ErrorCategory::kUnsupported,
               what + ": FP8 weight " + weight.shape_str() +
                   " cannot become mxfp8 (its input dim is not a multiple of 32); load it dense instead");
  return quantize(dequantize_f32(weight, scale_inv, block, what), default_params(QuantMode::kMxfp8));
}

}  // namespace mlxcel
