#pragma once
// Which quantization modes each backend kind runs natively, which it converts at load (and to
// what), and which it rejects. The table is data (capability.cpp, kRules) so that the GPU work can
// flip an entry to native as kernels land. docs/checkpoints.md reproduces it.
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "quant/quant_params.h"
#include "quant/quantize.h"

namespace mlxcel {

enum class RouteKind : std::uint8_t { kNative = 0, kConvert = 1, kReject = 2 };

struct Route {
  RouteKind kind = RouteKind::kReject;
  QuantParams target{};   // kConvert: the mode the weight is converted to
  bool lossless = false;  // kConvert: the conversion reproduces every dequantized value exactly
  std::string reason;     // kReject: why; kConvert: a short note for the log
  std::string str() const;  // "native", "convert -> affine 8-bit gs 32 (exact)", "reject: ..."
};

Route route(BackendKind backend, const QuantParams& p);

// Route, throwing kUnsupported for a rejection with a message that names the tensor, the mode,
// the backend and what the user can do.
Route route_or_throw(BackendKind backend, const QuantParams& p, const std::string& tensor);

// Converts a quantized weight to `target`. Exact repacks where the target grid contains every
// source value (affine b-bit -> affine 8-bit same group size; mxfp4 -> affine 8-bit gs 32);
// otherwise dequantize to fp32 and re-quantize with MLX's quantizer. Scales/biases of an affine
// target use `scale_dtype` (default: the source's scales dtype for affine, BF16 otherwise).
QuantizedTensor convert_weight(const Tensor& w, const Tensor& scales, const Tensor* biases,
                               const QuantParams& from, const QuantParams& to,
                               std::optional<DType> scale_dtype = std::nullopt);

struct CapabilityRow {
  BackendKind backend;
  QuantParams params;
  Route route;
};
// Every (backend, valid params) pair with its route, for docs and `mlxcel inspect`.
std::vector<CapabilityRow> capability_table();

}  // namespace mlxcel
