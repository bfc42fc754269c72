#include "quant/quant_params.h"

#include "core/error.h"

namespace mlxcel {

std::string_view quant_mode_name(QuantMode m) {
  switch (m) {
    case QuantMode::kAffine: return "affine";
    case QuantMode::kMxfp4: return "mxfp4";
    case QuantMode::kMxfp8: return "mxfp8";
    case QuantMode::kNvfp4: return "nvfp4";
  }
  return "?";
}

bool parse_quant_mode(std::string_view s, QuantMode* out) {
  for (QuantMode m : {QuantMode::kAffine, QuantMode::kMxfp4, QuantMode::kMxfp8, QuantMode::kNvfp4}) {
    if (s == quant_mode_name(m)) {
      *out = m;
      return true;
    }
  }
  return false;
}

std::string QuantParams::str() const {
  return std::string(quant_mode_name(mode)) + " " + std::to_string(bits) + "-bit gs " +
         std::to_string(group_size);
}

QuantParams default_params(QuantMode mode) {
  switch (mode) {
    case QuantMode::kAffine: return {mode, 4, 64};
    case QuantMode::kMxfp4: return {mode, 4, 32};
    case QuantMode::kMxfp8: return {mode, 8, 32};
    case QuantMode::kNvfp4: return {mode, 4, 16};
  }
  return {};
}

QuantParams with_defaults(QuantMode mode, int bits, int group_size) {
  QuantParams p = default_params(mode);
  if (bits > 0) p.bits = bits;
  if (group_size > 0) p.group_size = group_size;
  return p;
}

bool is_fp_mode(QuantMode m) { return m != QuantMode::kAffine; }
bool has_biases(QuantMode m) { return m == QuantMode::kAffine; }
DType fp_scale_dtype(QuantMode m) {
  return m == QuantMode::kNvfp4 ? DType::kF8E4M3 : DType::kF8E8M0;
}

bool params_valid(const QuantParams& p, std::string* why) {
  auto fail = [&](const std::string& s) {
    if (why) *why = s;
    return false;
  };
  if (p.mode == QuantMode::kAffine) {
    if (!(p.bits >= 1 && p.bits <= 8 && p.bits != 7)) {
      return fail("affine bits must be one of 1, 2, 3, 4, 5, 6, 8 (got " + std::to_string(p.bits) + ")");
    }
    if (p.group_size != 32 && p.group_size != 64 && p.group_size != 128) {
      return fail("affine group_size must be 32, 64 or 128 (got " + std::to_string(p.group_size) + ")");
    }
    return true;
  }
  QuantParams d = default_params(p.mode);
  if (p.bits != d.bits || p.group_size != d.group_size) {
    return fail(std::string(quant_mode_name(p.mode)) + " requires bits " + std::to_string(d.bits) +
                " and group_size " + std::to_string(d.group_size) + " (got " + std::to_string(p.bits) +
                "-bit gs " + std::to_string(p.group_size) + ")");
  }
  return true;
}

void check_params(const QuantParams& p, const std::string& what) {
  std::string why;
  if (!params_valid(p, &why)) {
    throw_error(ErrorCategory::kBadInput,
                what + ": invalid quantization parameters: " + why +
                    "; fix config.json's quantization section or re-quantize with mlx_lm.convert");
  }
}

Shape packed_weight_shape(const Shape& w, const QuantParams& p) {
  Shape s = w;
  s.back() = w.back() * p.bits / 32;
  return s;
}

Shape scales_shape(const Shape& w, const QuantParams& p) {
  Shape s = w;
  s.back() = w.back() / p.group_size;
  return s;
}

std::int64_t unpacked_dim(std::int64_t packed_last, int bits) { return packed_last * 32 / bits; }

void check_quantized_shapes(const Tensor& w, const Tensor& scales, const Tensor* biases,
                            const QuantParams& p, const std::string& what) {
  check_params(p, what);
  auto fail = [&](const std::string& s) {
    throw_error(ErrorCategory::kBadInput,
                what + ": " + s + " (" + p.str() + "); the checkpoint's tensors do not match its " +
                    "config.json quantization parameters");
  };
  if (w.dtype() != DType::kU32) fail("packed weight must be U32, got " + std::string(dtype_name(w.dtype())));
  if (w.ndim() < 2) fail("packed weight must have at least 2 dims, got " + w.shape_str());
  if (scales.ndim() != w.ndim()) {
    fail("scales " + scales.shape_str() + " and weight " + w.shape_str() + " differ in rank");
  }
  for (int i = 0; i + 1 < w.ndim(); ++i) {
    if (scales.dim(i) != w.dim(i)) {
      fail("scales " + scales.shape_str() + " and weight " + w.shape_str() + " differ in leading dims");
    }
  }
  const std::int64_t wk = w.dim(-1) * 32;
  if (wk % p.bits != 0 || wk / p.bits != scales.dim(-1) * p.group_size) {
    fail("weight " + w.shape_str() + " holds " + std::to_string(wk / p.bits) + " values per row but scales " +
         scales.shape_str() + " cover " + std::to_string(scales.dim(-1) * p.group_size));
  }
  if (p.mode == QuantMode::kAffine) {
    if (!dtype_is_float(scales.dtype()) ||
        (scales.dtype() != DType::kF32 && scales.dtype() != DType::kF16 && scales.dtype() != DType::kBF16)) {
      fail("affine scales must be F32, F16 or BF16, got " + std::string(dtype_name(scales.dtype())));
    }
    if (biases == nullptr || !biases->defined()) fail("affine quantization needs biases");
    if (biases->shape() != scales.shape() || biases->dtype() != scales.dtype()) {
      fail("biases " + biases->shape_str() + " " + std::string(dtype_name(biases->dtype())) +
           " must match scales " + scales.shape_str() + " " + std::string(dtype_name(scales.dtype())));
    }
  } else {
    if (scales.dtype() != DType::kU8 && scales.dtype() != fp_scale_dtype(p.mode)) {
      fail("scales must be U8 (" + std::string(dtype_name(fp_scale_dtype(p.mode))) + " bytes), got " +
           std::string(dtype_name(scales.dtype())));
    }
    if (biases != nullptr && biases->defined()) fail("mode has no biases but a biases tensor is present");
  }
}

}  // namespace mlxcel
