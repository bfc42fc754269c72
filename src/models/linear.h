#pragma once
// Loading the weights of mlx-lm modules with the shapes config.json implies: a Linear (dense
// [out, in] F32/F16/BF16 or an MLX-quantized triplet, optional bias), a stacked SwitchLinear, an
// RMSNorm weight. Mismatches are bad_input naming the tensor; the result lives on the device.
#include <cstdint>
#include <string>

#include "models/weights.h"
#include "ops/ops.h"

namespace mlxcel::models {

ops::LinearWeight load_linear(const ops::Exec& e, const WeightSource& w, const std::string& module,
                              std::int64_t in, std::int64_t out, bool bias);
// `<module>.weight` etc. stacked as [num_experts, out, in] (mlx-lm SwitchLinear).
ops::LinearWeight load_stacked(const ops::Exec& e, const WeightSource& w, const std::string& module,
                               std::int64_t experts, std::int64_t in, std::int64_t out);
// gemma: the weight is (1 + w), computed in the weight's dtype as mlx-lm does.
ops::NormWeight load_norm(const ops::Exec& e, const WeightSource& w, const std::string& name,
                          std::int64_t dim, float eps, bool plus_one);

}  // namespace mlxcel::models
