#pragma once
// Rotary tables as mlx-lm's initialize_rope (and phi3's SuScaledRoPE) build them from
// config.json; the frequency formulas are those of backend/cpu/rope.h, computed once on the host
// at load and uploaded.
#include <cstdint>

#include "backend/cpu/rope.h"
#include "ops/ops.h"

namespace mlxcel::ops {

using RopeScaling = cpu::RopeScaling;

// Throws unsupported for a rope type it does not know (naming it).
Rope make_rope(Backend& be, std::int64_t dims, float base, bool traditional,
               const RopeScaling* scaling, float max_position_embeddings);

}  // namespace mlxcel::ops
