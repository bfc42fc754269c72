#pragma once
// The rotary embedding of a layer, as mlx-lm's initialize_rope (and phi3's SuScaledRoPE) build
// it from config.json; the kernel and frequency tables are backend/cpu/rope.h.
#include "backend/cpu/rope.h"
#include "models/model_config.h"

namespace mlxcel::models {

// `base` is rope_theta, or gemma3's rope_local_base_freq on sliding layers (which use no
// scaling); `dims` the rotated features (phi3: head_dim * partial_rotary_factor).
cpu::RopePlan make_rope(const ModelConfig& c, int dims, double base, bool use_scaling);

}  // namespace mlxcel::models
