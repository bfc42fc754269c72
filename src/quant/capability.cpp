#include "quant/capability.h"

#include <cmath>

#include "core/error.h"
#include "quant/packing.h"

namespace mlxcel {
namespace {

// A rule matches a backend, a mode and a set of bit widths (0 = any). First match wins.
struct Rule {
  BackendKind backend;
  QuantMode mode;
  int bits;  // 0: any
  RouteKind kind;
  // kConvert: target mode / bits / group size (group 0 = keep the source group size).
  QuantMode to_mode;
  int to_bits;
  int to_group;
  const char* note;
};

// CPU: the reference kernels run every MLX mode. GPUs (one kernel tree for CUDA and HIP): the
// GPU issue implements affine 4/8 and the mx modes natively; other affine widths repack exactly
// to 8 bits (same scales and biases), nvfp4 re-quantizes to affine 8-bit gs 32 (its E4M3 group
// scales do not map onto one affine grid).
constexpr Rule kRules[] = {
    {BackendKind::kCpu, QuantMode::kAffine, 0, RouteKind::kNative, QuantMode::kAffine, 0, 0, ""},
    {BackendKind::kCpu, QuantMode::kMxfp4, 0, RouteKind::kNative, QuantMode::kMxfp4, 0, 0, ""},
    {BackendKind::kCpu, QuantMode::kMxfp8, 0, RouteKind::kNative, QuantMode::kMxfp8, 0, 0, ""},
    {BackendKind::kCpu, QuantMode::kNvfp4, 0, RouteKind::kNative, QuantMode::kNvfp4, 0, 0, ""},

    {BackendKind::kCuda, QuantMode::kAffine, 4, RouteKind::kNative, QuantMode::kAffine, 0, 0, ""},
    {BackendKind::kCuda, QuantMode::kAffine, 8, RouteKind::kNative, QuantMode::kAffine, 0, 0, ""},
    {BackendKind::kCuda, QuantMode::kAffine, 0, RouteKind::kConvert, QuantMode::kAffine, 8, 0,
     "no GPU kernel for this bit width; codes widen to 8 bits with the same scales and biases"},
    {BackendKind::kCuda, QuantMode::kMxfp4, 0, RouteKind::kNative, QuantMode::kMxfp4, 0, 0, ""},
    {BackendKind::kCuda, QuantMode::kMxfp8, 0, RouteKind::kNative, QuantMode::kMxfp8, 0, 0, ""},
    {BackendKind::kCuda, QuantMode::kNvfp4, 0, RouteKind::kConvert, QuantMode::kAffine, 8, 32,
     "no nvfp4 GPU kernel; dequantized and re-quantized (error below two 8-bit steps of the group range)"},

    {BackendKind::kRocm, QuantMode::kAffine, 4, RouteKind::kNative, QuantMode::kAffine, 0, 0, ""},
    {BackendKind::kRocm, QuantMode::kAffine, 8, RouteKind::kNative, QuantMode::kAffine, 0, 0, ""},
    {BackendKind::kRocm, QuantMode::kAffine, 0, RouteKind::kConvert, QuantMode::kAffine, 8, 0,
     "no GPU kernel for this bit width; codes widen to 8 bits with the same scales and biases"},
    {BackendKind::kRocm, QuantMode::kMxfp4, 0, RouteKind::kNative, QuantMode::kMxfp4, 0, 0, ""},
    {BackendKind::kRocm, QuantMode::kMxfp8, 0, RouteKind::kNative, QuantMode::kMxfp8, 0, 0, ""},
    {BackendKind::kRocm, QuantMode::kNvfp4, 0, RouteKind::kConvert, QuantMode::kAffine, 8, 32,
     "no nvfp4 GPU kernel; dequantized and re-quantized (error below two 8-bit steps of the group range)"},
};

bool exact_conversion(const QuantParams& from, const QuantParams& to) {
  if (from.mode == QuantMode::kAffine && to.mode == QuantMode::kAffine) {
    return to.group_size == from.group_size && to.bits >= from.bits;
  }
  return from.mode == QuantMode::kMxfp4 && to.mode == QuantMode::kAffine && to.bits == 8 &&
         to.group_size == 32;
}

}  // namespace

std::string Route::str() const {
  switch (kind) {
    case RouteKind::kNative: return "native";
    case RouteKind::kConvert: return "convert -> " + target.str() + (lossless ? " (exact)" : " (lossy)");
    case RouteKind::kReject: return "reject: " + reason;
  }
  return "?";
}

Route route(BackendKind backend, const QuantParams& p) {
  Route r;
  std::string why;
  if (!params_valid(p, &why)) {
    r.kind = RouteKind::kReject;
    r.reason = why;
    return r;
  }
  for (const Rule& rule : kRules) {
    if (rule.backend != backend || rule.mode != p.mode || (rule.bits != 0 && rule.bits != p.bits)) continue;
    r.kind = rule.kind;
    if (rule.kind == RouteKind::kConvert) {
      r.target = {rule.to_mode, rule.to_bits, rule.to_group ? rule.to_group : p.group_size};
      r.lossless = exact_conversion(p, r.target);
      r.reason = rule.note;
    } else if (rule.kind == RouteKind::kReject) {
      r.reason = rule.note;
    }
    return r;
  }
  r.kind = RouteKind::kReject;
  r.reason = "no kernel for " + p.str() + " on " + std::string(backend_name(backend));
  return r;
}

Route route_or_throw(BackendKind backend, const QuantParams& p, const std::string& tensor) {
  Route r = route(backend, p);
  if (r.kind == RouteKind::kReject) {
    throw_error(ErrorCategory::kUnsupported,
                tensor + ": quantization " + p.str() + " cannot run on backend " +
                    std::string(backend_name(backend)) + ": " + r.reason +
                    "; run with --backend cpu, or re-quantize the model with mlx_lm.convert "
                    "(e.g. -q --q-bits 4 --q-group-size 64)");
  }
  return r;
}

QuantizedTensor convert_weight(const Tensor& w_in, const Tensor& scales_in, const Tensor* biases_in,
                               const QuantParams& from, const QuantParams& to,
                               std::optional<DType> scale_dtype) {
  check_quantized_shapes(w_in, scales_in, biases_in, from, "convert_weight");
  check_params(to, "convert_weight target");
  const DType sdt = scale_dtype ? *scale_dtype
                                : (from.mode == QuantMode::kAffine ? scales_in.dtype() : DType::kBF16);
  const Tensor w = w_in.contiguous(), scales = scales_in.contiguous();
  Shape fshape = w.shape();
  fshape.back() = unpacked_dim(w.dim(-1), from.bits);
  const std::int64_t K = fshape.back();
  const std::int64_t rows = shape_numel(fshape) / std::max<std::int64_t>(K, 1);
  if (exact_conversion(from, to) && from.mode == QuantMode::kAffine &&
      (!scale_dtype || *scale_dtype == scales.dtype())) {
    QuantizedTensor out;
    out.weight = Tensor::empty(DType::kU32, packed_weight_shape(fshape, to));
    out.scales = scales;
    out.biases = biases_in->contiguous();
    const auto* src = static_cast<const std::uint8_t*>(w.raw());
    auto* dst = static_cast<std::uint8_t*>(out.weight.raw());
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* sr = src + r * (K * from.bits / 8);
      std::uint8_t* dr = dst + r * (K * to.bits / 8);
      for (std::int64_t k = 0; k < K; ++k) quant::put_code(dr, k, to.bits, quant::get_code(sr, k, from.bits));
    }
    return out;
  }
  if (exact_conversion(from, to) && from.mode == QuantMode::kMxfp4 &&
      (sdt == DType::kF32 || sdt == DType::kBF16)) {
    // mxfp4 group values are (2^e / 2) * {0, ±1, ±2, ±3, ±4, ±6, ±8, ±12}: an 8-bit affine grid
    // with step 2^(e-1) and bias -12 * 2^(e-1) holds all of them (codes 0..24). BF16 and F32 hold
    // 2^(e-1) exactly down to e = 0 (2^-128 is a BF16 subnormal).
    QuantizedTensor out;
    Shape sshape = scales.shape();
    out.weight = Tensor::empty(DType::kU32, packed_weight_shape(fshape, to));
    out.scales = Tensor::empty(sdt, sshape);
    out.biases = Tensor::empty(sdt, sshape);
    const auto* src = static_cast<const std::uint8_t*>(w.raw());
    const auto* sb = static_cast<const std::uint8_t*>(scales.raw());
    auto* dst = static_cast<std::uint8_t*>(out.weight.raw());
    const std::int64_t groups = K / 32;
    static const std::uint32_t kCode[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint8_t* sr = src + r * (K / 2);
      std::uint8_t* dr = dst + r * K;
      for (std::int64_t g = 0; g < groups; ++g) {
        const float step = fp8_e8m0_to_float(sb[r * groups + g]) * 0.5f;
        quant::store_float(out.scales.raw(), sdt, r * groups + g, step);
        quant::store_float(out.biases.raw(), sdt, r * groups + g, -12.0f * step);
      }
      for (std::int64_t k = 0; k < K; ++k) dr[k] = static_cast<std::uint8_t>(kCode[quant::get_code(sr, k, 4)]);
    }
    return out;
  }
  Tensor f = dequantize(w, scales, biases_in, from, DType::kF32);
  if (to.mode == QuantMode::kAffine && sdt != DType::kF32) {
    // The affine quantizer stores scales in the input dtype; round the values to it first so the
    // target grid is built from what the scales dtype can hold.
    Tensor g = Tensor::empty(sdt, f.shape());
    for (std::int64_t i = 0; i < f.numel(); ++i) quant::store_float(g.raw(), sdt, i, f.data<float>()[i]);
    f = g;
  }
  return quantize(f, to);
}

std::vector<CapabilityRow> capability_table() {
  std::vector<CapabilityRow> rows;
  for (BackendKind b : {BackendKind::kCpu, BackendKind::kCuda, BackendKind::kRocm}) {
    for (int bits : {1, 2, 3, 4, 5, 6, 8}) {
      QuantParams p{QuantMode::kAffine, bits, 64};
      rows.push_back({b, p, route(b, p)});
    }
    for (QuantMode m : {QuantMode::kMxfp4, QuantMode::kMxfp8, QuantMode::kNvfp4}) {
      QuantParams p = default_params(m);
      rows.push_back({b, p, route(b, p)});
    }
  }
  return rows;
}

}  // namespace mlxcel
