#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "quant/packing.h"

namespace mlxcel {
namespace quant {






std::uint8_t encode_fp4_nearest(float x) {
  // MLX's CPU path picks argmin |x - LUT[i]| over the 16 E2M1 codes; exact ties resolve to the
  // first index, so -0.1 encodes as +0 and 0.75 as 0.5. A NaN compares false everywhere: index 0.
  std::uint8_t best = 0;
  float best_d = std::fabs(x - fp4_e2m1_to_float(0));
  for (std::uint8_t i = 1; i < 16; ++i) {
    float d = std::fabs(x - fp4_e2m1_to_float(i));
    if (d < best_d) {
      best_d = d;
      best = i;
    }
  }
  return best;
}

std::uint8_t e8m0_ceil(float x) {
  // Nearest power of two in the log domain, then one step up when it is still below x: exact
  // even where log2f rounds (x = 2^k * (1 + 2^-23) gets 2^(k+1)).
  int e = static_cast<int>(std::round(std::log2(x)));
  e = std::clamp(e, -127, 127);
  std::uint8_t b = static_cast<std::uint8_t>(e + 127);
  if (b < 0xFE && fp8_e8m0_to_float(b) < x) ++b;
  return b;
}


}  // namespace quant

namespace {

using quant::load_float;
using quant::store_float;

void check_float_input(const Tensor& w, const QuantParams& p, const char* op) {
  MLXCEL_CHECK(w.dtype() == DType::kF32 || w.dtype() == DType::kF16 || w.dtype() == DType::kBF16,
               ErrorCategory::kBadInput,
               std::string(op) + ": input must be F32, F16 or BF16, got " + std::string(dtype_name(w.dtype())));
  MLXCEL_CHECK(w.ndim() >= 2, ErrorCategory::kBadInput,
               std::string(op) + ": input must have at least 2 dims, got " + w.shape_str());
  MLXCEL_CHECK(w.dim(-1) % p.group_size == 0 && w.dim(-1) * p.bits % 32 == 0, ErrorCategory::kBadInput,
               std::string(op) + ": last dim of " + w.shape_str() + " must be divisible by group_size " +
                   std::to_string(p.group_size));
}

void quantize_affine_group(const void* src, DType t, std::int64_t base, int gs, int bits,
                           std::uint8_t* row, std::int64_t j0, float* scale_out, float* bias_out) {
  const float n_bins = static_cast<float>((1 << bits) - 1);
  const float eps = 1e-7f;
  float w_min = std::numeric_limits<float>::infinity();
  float w_max = -w_min;
  for (int j = 0; j < gs; ++j) {
    float v = load_float(src, t, base + j);
    w_max = std::max(w_max, v);
    w_min = std::min(w_min, v);
  }
  float scale, bias = 0;
  if (bits == 1) {
    // MLX's 1-bit rule is plain min/max: the two codes are w_min and w_min + scale.
    scale = std::max(w_max - w_min, eps);
    bias = w_min;
  } else {
    const bool mask = std::fabs(w_min) > std::fabs(w_max);
    scale = std::max((w_max - w_min) / n_bins, eps);
    scale = mask ? scale : -scale;
    const float edge = mask ? w_min : w_max;
    const float q0 = std::rint(edge / scale);
    if (q0 != 0) {
      scale = edge / q0;
      bias = edge;
    }
  }
  for (int j = 0; j < gs; ++j) {
    float v = load_float(src, t, base + j);
    float q = std::rint((v - bias) / scale);
    q = std::min(std::max(q, 0.0f), n_bins);
    // NaN elements (MLX leaves their code implementation-defined) are stored as 0.
    std::uint32_t code = std::isnan(q) ? 0u : static_cast<std::uint32_t>(q);
    quant::put_code(row, j0 + j, bits, code);
  }
  *scale_out = scale;
  *bias_out = bias;
}

struct DequantArgs {
  const std::uint8_t* wq;
  const std::uint8_t* sb;
  const void* scales;
  const void* biases;
  void* out;
  std::int64_t rows, groups, K, row_bytes;
  QuantParams p;
  bool global;
  float gfactor;
};

template <typename T>
inline float round_t(float v) {
  return to_f32<T>(from_f32<T>(v));
}

// mx.dequantize on the CPU computes affine in the scales dtype S: s*q and (+ b) each round to S.
template <typename S, typename O>
void dequant_affine(const DequantArgs& a) {
  const S* sc = static_cast<const S*>(a.scales);
  const S* bi = static_cast<const S*>(a.biases);
  O* out = static_cast<O*>(a.out);
  const int gs = a.p.group_size, bits = a.p.bits;
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::uint8_t* row = a.wq + r * a.row_bytes;
    for (std::int64_t g = 0; g < a.groups; ++g) {
      const float s = to_f32<S>(sc[r * a.groups + g]);
      const float b = to_f32<S>(bi[r * a.groups + g]);
      O* o = out + r * a.K + g * gs;
      auto put = [&](int j, std::uint32_t code) {
        o[j] = from_f32<O>(round_t<S>(round_t<S>(s * static_cast<float>(code)) + b));
      };
      if (bits == 8) {
        const std::uint8_t* c = row + g * gs;
        for (int j = 0; j < gs; ++j) put(j, c[j]);
      } else if (bits == 4) {
        const std::uint8_t* c = row + g * gs / 2;
        for (int j = 0; j < gs / 2; ++j) {
          put(2 * j, c[j] & 0xFu);
          put(2 * j + 1, c[j] >> 4);
        }
      } else {
        for (int j = 0; j < gs; ++j) put(j, quant::get_code(row, g * gs + j, bits));
      }
    }
  }
}

// The fp modes compute in the requested dtype C: the scale converts to C first (2^-127 flushes to
// 0 in F16), then the product rounds. With a global scale the F32 factor multiplies the scale
// first (MLX's order) and the result stays F32. Invalid scale bytes give a zero group.
template <typename C, typename O>
void dequant_fp(const DequantArgs& a) {
  O* out = static_cast<O*>(a.out);
  const int gs = a.p.group_size, bits = a.p.bits;
  float lut[256];
  const int ncodes = bits == 8 ? 256 : 16;
  for (int c = 0; c < ncodes; ++c) lut[c] = round_t<C>(quant::decode_fp_elem(a.p.mode, static_cast<std::uint32_t>(c)));
  for (std::int64_t r = 0; r < a.rows; ++r) {
    const std::uint8_t* row = a.wq + r * a.row_bytes;
    for (std::int64_t g = 0; g < a.groups; ++g) {
      const float s = round_t<C>(quant::decode_fp_scale(a.p.mode, a.sb[r * a.groups + g]));
      const float sg = s * a.gfactor;
      O* o = out + r * a.K + g * gs;
      auto put = [&](int j, std::uint32_t code) {
        const float e = lut[code];
        o[j] = from_f32<O>(a.global ? e * sg : round_t<C>(e * s));
      };
      if (bits == 8) {
        const std::uint8_t* c = row + g * gs;
        for (int j = 0; j < gs; ++j) put(j, c[j]);
      } else {
        const std::uint8_t* c = row + g * gs / 2;
        for (int j = 0; j < gs / 2; ++j) {
          put(2 * j, c[j] & 0xFu);
          put(2 * j + 1, c[j] >> 4);
        }
      }
    }
  }
}

template <typename F>
void dispatch1(DType t, F&& f) {
  switch (t) {
    case DType::kBF16: f(bf16{}); break;
    case DType::kF16: f(f16{}); break;
    default: f(float{}); break;
  }
}

template <typename F>
void dispatch2(DType a, DType b, F&& f) {
  dispatch1(a, [&](auto ta) { dispatch1(b, [&](auto tb) { f(ta, tb); }); });
}

}  // namespace

QuantizedTensor quantize(const Tensor& w_in, const QuantParams& p, std::optional<float> global_scale) {
  check_params(p, "quantize");
  check_float_input(w_in, p, "quantize");
  MLXCEL_CHECK(!global_scale || p.mode == QuantMode::kNvfp4, ErrorCategory::kBadInput,
               "quantize: global_scale is only defined for nvfp4");
  const Tensor w = w_in.contiguous();
  const std::int64_t K = w.dim(-1);
  const std::int64_t rows = w.numel() / std::max<std::int64_t>(K, 1);
  const std::int64_t groups = K / p.group_size;
  const std::int64_t row_bytes = K * p.bits / 8;

  QuantizedTensor out;
  out.weight = Tensor::empty(DType::kU32, packed_weight_shape(w.shape(), p));
  const DType sdt = p.mode == QuantMode::kAffine ? w.dtype() : DType::kU8;
  out.scales = Tensor::empty(sdt, scales_shape(w.shape(), p));
  if (p.mode == QuantMode::kAffine) out.biases = Tensor::empty(sdt, scales_shape(w.shape(), p));

  const void* src = w.raw();
  auto* wq = static_cast<std::uint8_t*>(out.weight.raw());
  for (std::int64_t r = 0; r < rows; ++r) {
    std::uint8_t* row = wq + r * row_bytes;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t base = r * K + g * p.group_size;
      const std::int64_t gi = r * groups + g;
      if (p.mode == QuantMode::kAffine) {
        float s, b;
        quantize_affine_group(src, w.dtype(), base, p.group_size, p.bits, row, g * p.group_size, &s, &b);
        store_float(out.scales.raw(), sdt, gi, s);
        store_float(out.biases.raw(), sdt, gi, b);
        continue;
      }
      float amax = 0.0f;
      bool has_nan = false;
      for (int j = 0; j < p.group_size; ++j) {
        float v = std::fabs(load_float(src, w.dtype(), base + j));
        if (std::isnan(v)) has_nan = true;
        amax = std::max(amax, v);
      }
      if (has_nan) amax = std::numeric_limits<float>::quiet_NaN();
      const bool fp8 = p.mode == QuantMode::kMxfp8;
      std::uint8_t sbyte;
      float decoded;
      float encode = 1.0f;
      // amax / emax is computed in the input dtype (F16 / BF16 round it) before encoding.
      if (p.mode == QuantMode::kNvfp4) {
        float s = quant::round_to(w.dtype(), amax / 6.0f);
        if (global_scale) {
          const float factor = *global_scale / (448.0f * 6.0f);
          encode = factor != 0.0f ? 1.0f / factor : 1.0f;
          s = s * encode;
        }
        sbyte = float_to_fp8_e4m3(s);
        decoded = fp8_e4m3_to_float(sbyte);
      } else {
        const float s = quant::round_to(w.dtype(), amax / (fp8 ? 448.0f : 6.0f));
        if (amax == 0.0f) {
          sbyte = 127;
          decoded = 1.0f;
        } else if (!std::isfinite(s)) {
          // MLX's CPU graph stores byte 128 and divides by a NaN scale.
          sbyte = 128;
          decoded = std::numeric_limits<float>::quiet_NaN();
        } else {
          sbyte = quant::e8m0_ceil(s);
          decoded = fp8_e8m0_to_float(sbyte);
        }
      }
      static_cast<std::uint8_t*>(out.scales.raw())[gi] = sbyte;
      for (int j = 0; j < p.group_size; ++j) {
        float v = load_float(src, w.dtype(), base + j);
        // The CPU graph divides in the input dtype (F16 results below 2^-14 round there).
        float y = decoded == 0.0f ? 0.0f : quant::round_to(w.dtype(), (v * encode) / decoded);
        // A NaN scale (non-finite amax) leaves each element NaN carrying the weight's sign, which
        // the fp8 encoder saturates to +-448 as MLX does.
        if (std::isnan(decoded)) y = std::copysign(std::numeric_limits<float>::quiet_NaN(), v);
        std::uint32_t code = fp8 ? float_to_fp8_e4m3(y) : quant::encode_fp4_nearest(y);
        quant::put_code(row, g * p.group_size + j, p.bits, code);
      }
    }
  }
  return out;
}

Tensor dequantize(const Tensor& w_in, const Tensor& scales_in, const Tensor* biases_in,
                  const QuantParams& p, std::optional<DType> out_dtype, std::optional<float> global_scale) {
  check_quantized_shapes(w_in, scales_in, biases_in, p, "dequantize");
  const Tensor w = w_in.contiguous();
  const Tensor scales = scales_in.contiguous();
  Tensor biases;
  if (biases_in) biases = biases_in->contiguous();
  // With a global scale (nvfp4) MLX computes in the requested dtype, then multiplies by the F32
  // factor, so the result is F32.
  const DType cdt = out_dtype ? *out_dtype
                              : (p.mode == QuantMode::kAffine ? scales.dtype() : DType::kBF16);
  const DType odt = global_scale ? DType::kF32 : cdt;
  MLXCEL_CHECK(cdt == DType::kF32 || cdt == DType::kF16 || cdt == DType::kBF16, ErrorCategory::kBadInput,
               "dequantize: output dtype must be F32, F16 or BF16");
  Shape oshape = w.shape();
  oshape.back() = unpacked_dim(w.dim(-1), p.bits);
  Tensor out = Tensor::empty(odt, oshape);
  const std::int64_t K = oshape.back();
  const std::int64_t rows = out.numel() / std::max<std::int64_t>(K, 1);
  const std::int64_t groups = K / p.group_size;
  const std::int64_t row_bytes = K * p.bits / 8;
  const auto* wq = static_cast<const std::uint8_t*>(w.raw());
  const auto* sb = static_cast<const std::uint8_t*>(scales.raw());
  const DType sdt = scales.dtype();
  const float gfactor = global_scale ? *global_scale / (448.0f * 6.0f) : 1.0f;
  DequantArgs a{wq, sb, scales.raw(), biases.defined() ? biases.raw() : nullptr, out.raw(), rows, groups, K,
                row_bytes, p, global_scale.has_value(), gfactor};
  if (p.mode == QuantMode::kAffine) {
    dispatch2(sdt, odt, [&](auto s_tag, auto o_tag) {
      dequant_affine<decltype(s_tag), decltype(o_tag)>(a);
    });
  } else {
    dispatch2(cdt, odt, [&](auto c_tag, auto o_tag) {
      dequant_fp<decltype(c_tag), decltype(o_tag)>(a);
    });
  }
  return out;
}

void check_scales(const Tensor& scales_in, const Tensor* biases, const QuantParams& p,
                 const std::string& what) {
  const Tensor scales = scales_in.contiguous();
  const std::int64_t n = scales.numel();
  const std::int64_t groups = scales.ndim() ? scales.dim(-1) : 1;
  auto where = [&](std::int64_t i) {
    return "row " + std::to_string(i / std::max<std::int64_t>(groups, 1)) + ", group " +
           std::to_string(i % std::max<std::int64_t>(groups, 1));
  };
  if (p.mode == QuantMode::kAffine) {
    for (int pass = 0; pass < 2; ++pass) {
      const Tensor* t = pass == 0 ? &scales : biases;
      if (t == nullptr || !t->defined()) continue;
      const Tensor c = t->contiguous();
      for (std::int64_t i = 0; i < n; ++i) {
        float v = load_float(c.raw(), c.dtype(), i);
        if (!std::isfinite(v)) {
          throw_error(ErrorCategory::kBadInput,
                      what + ": " + (pass == 0 ? "scales" : "biases") + " hold a non-finite value (" +
                          std::to_string(v) + ") at " + where(i) +
                          "; the checkpoint is corrupt: re-download or re-quantize it with mlx_lm.convert");
        }
      }
    }
    return;
  }
  const auto* s = static_cast<const std::uint8_t*>(scales.raw());
  for (std::int64_t i = 0; i < n; ++i) {
    if (!quant::fp_scale_invalid(p.mode, s[i])) continue;
    const bool e8 = p.mode != QuantMode::kNvfp4;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", s[i]);
    throw_error(ErrorCategory::kBadInput,
                what + ": " + (e8 ? "E8M0" : "E4M3") + " scale byte " + hex + " at " + where(i) + " (" +
                    std::string(quant_mode_name(p.mode)) + "); MLX decodes it as " + (e8 ? "+inf" : "NaN") +
                    ", which turns the group into NaN. The checkpoint is corrupt: re-download it or "
                    "re-quantize it with mlx_lm.convert");
  }
}

}  // namespace mlxcel
