#pragma once
// Quantization parameters as MLX defines them (MLX_FORMATS.md §1.1, §2): a mode, a bit width and
// a group size along the last axis. The packed weight is U32 [..., N, K*bits/32]; scales are
// [..., N, K/group_size] in the weight dtype (affine) or U8 (fp modes); only affine has biases.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/tensor.h"

namespace mlxcel {

enum class QuantMode : std::uint8_t { kAffine = 0, kMxfp4 = 1, kMxfp8 = 2, kNvfp4 = 3 };

std::string_view quant_mode_name(QuantMode m);  // "affine", "mxfp4", "mxfp8", "nvfp4"
bool parse_quant_mode(std::string_view s, QuantMode* out);

struct QuantParams {
  QuantMode mode = QuantMode::kAffine;
  int bits = 4;
  int group_size = 64;
  bool operator==(const QuantParams&) const = default;
  std::string str() const;  // "affine 4-bit gs 64"
};

// MLX's defaults for a mode when group_size or bits are not given (`to_quantized(mode=...)`):
// affine 64/4, mxfp4 32/4, mxfp8 32/8, nvfp4 16/4.
QuantParams default_params(QuantMode mode);
// Fills unset values (<= 0) with the mode's defaults.
QuantParams with_defaults(QuantMode mode, int bits, int group_size);

// True if MLX accepts the combination: affine bits {1,2,3,4,5,6,8} x gs {32,64,128}; the fp modes
// only their one (bits, group_size) pair. `why` gets a sentence when false.
bool params_valid(const QuantParams& p, std::string* why = nullptr);
// Throws kBadInput naming `what` (a tensor or module) when the parameters are invalid.
void check_params(const QuantParams& p, const std::string& what);

bool is_fp_mode(QuantMode m);
bool has_biases(QuantMode m);
// Element/scale dtypes of the fp modes. Scales of the mx modes are E8M0, of nvfp4 E4M3.
DType fp_scale_dtype(QuantMode m);

// Shapes of the packed tensors for a float matrix of shape `w`.
Shape packed_weight_shape(const Shape& w, const QuantParams& p);
Shape scales_shape(const Shape& w, const QuantParams& p);
// The unpacked last dimension K implied by a packed weight's last dimension.
std::int64_t unpacked_dim(std::int64_t packed_last, int bits);

// Cross-checks a quantized triplet the way MLX's ops do (w.shape[-1]*32/bits ==
// scales.shape[-1]*group_size, matching leading dims, scales dtype, biases iff affine).
// Throws kBadInput naming `what`.
void check_quantized_shapes(const Tensor& w, const Tensor& scales, const Tensor* biases,
                            const QuantParams& p, const std::string& what);

}  // namespace mlxcel
