#pragma once
// Which modules of a checkpoint are quantized, with what parameters, and how each is loaded on
// a backend. Applies mlx-lm's load-time rule (model_config.h) to the tensors that exist, then
// cross-checks every quantized tensor's shapes against its parameters. Where a module has no
// per-path entry and the top-level parameters do not fit its shapes, the parameters are
// recovered from the shapes as mlx-lm 0.32's infer_quant_config does (U8 scales: the fp mode
// fixed by weight/scales widths; affine: the top-level group size, else the top-level bits).
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "quant/capability.h"

namespace mlxcel {

enum class QuantOrigin : std::uint8_t { kOverride, kDefault, kInferred, kFp8Block, kAwq };
std::string_view quant_origin_name(QuantOrigin o);

struct QuantizedModule {
  std::string path;          // e.g. model.layers.0.self_attn.q_proj
  QuantParams params;        // as stored (kFp8Block: the mxfp8 it is re-quantized to)
  QuantOrigin origin = QuantOrigin::kDefault;
  Shape shape;               // logical float shape [..., N, K]
  std::uint64_t bytes = 0;   // bytes of its stored tensors
  bool global_scale = false; // nvfp4 `P.global_scale` present
  Fp8Block fp8_block{};      // kFp8Block: the weight_block_size
};

struct QuantPlan {
  std::vector<QuantizedModule> modules;  // sorted by path
  std::uint64_t total_bytes = 0;         // every tensor in the checkpoint
  std::uint64_t quantized_bytes = 0;     // tensors of quantized modules
  std::size_t dense_tensors = 0;
};

// Throws kBadInput naming the module for inconsistent shapes, missing tensors, adversarial
// scales (E8M0 255, non-finite float scales/biases) and config entries without tensors.
QuantPlan plan_quantization(const Checkpoint& ckpt, const ModelConfig& cfg, bool check_scale_values = true);

struct LoadedQuantized {
  QuantParams params;      // what the backend will run
  QuantizedTensor tensors;
  std::optional<float> global_scale;
  Route route;             // route of the stored params on the backend
};

// Reads a module's tensors and applies the backend's route (conversion, FP8 re-quantization),
// logging every conversion. Throws kUnsupported for a rejected route.
LoadedQuantized load_quantized(const Checkpoint& ckpt, const QuantizedModule& m, BackendKind backend);

// AutoAWQ / GPTQ 4-bit (as mlx-lm repacks them): qweight I32 [in, out/8] with nibble order
// 0,4,1,5,2,6,3,7, scales [groups, out], optional qzeros I32 [groups, out/8]. Returns MLX affine
// tensors: weight [out, in/8], scales [out, groups], biases = -zero * scale (zero = 8 without
// qzeros).
QuantizedTensor repack_awq(const Tensor& qweight, const Tensor& scales, const Tensor* qzeros, int group_size,
                           const std::string& what);

}  // namespace mlxcel
