#pragma once
// The rotary embedding of a layer, as mlx-lm's initialize_rope (and phi3's SuScaledRoPE) build
// it from config.json.
#include "models/model_config.h"
#include "ops/ops.h"

namespace mlxcel::models {

// `base` is rope_theta, or gemma3's rope_local_base_freq on sliding layers (which use no
// scaling); `dims` the rotated features (phi3: head_dim * partial_rotary_factor).
ops::Rope make_rope(const ops::Exec& e, const ModelConfig& c, int dims, double base,
                    bool use_scaling);

}  // namespace mlxcel::models
