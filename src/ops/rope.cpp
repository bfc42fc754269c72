#include "ops/rope.h"

namespace mlxcel::ops {

Rope make_rope(Backend& be, std::int64_t dims, float base, bool traditional,
               const RopeScaling* scaling, float max_position_embeddings) {
  cpu::RopePlan p = cpu::make_rope_plan(dims, base, traditional, scaling, max_position_embeddings);
  return Rope::upload(be, p.dims, p.traditional, p.base, p.scale, p.input_scale,
                      std::move(p.freqs));
}

}  // namespace mlxcel::ops
