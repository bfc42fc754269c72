#include "models/rope.h"

#include "ops/rope.h"

namespace mlxcel::models {

ops::Rope make_rope(const ops::Exec& e, const ModelConfig& c, int dims, double base,
                    bool use_scaling) {
  const RopeScaling& s = c.rope_scaling;
  const std::string type = (!use_scaling || s.type.empty()) ? "default" : s.type;
  if (type == "default")
    return ops::make_rope(e.backend(), dims, static_cast<float>(base), c.rope_traditional, nullptr,
                          static_cast<float>(c.max_position_embeddings));
  ops::RopeScaling r;
  r.type = type;
  r.factor = static_cast<float>(s.factor);
  r.low_freq_factor = static_cast<float>(s.low_freq_factor);
  r.high_freq_factor = static_cast<float>(s.high_freq_factor);
  r.short_factor.assign(s.short_factor.begin(), s.short_factor.end());
  r.long_factor.assign(s.long_factor.begin(), s.long_factor.end());
  r.beta_fast = static_cast<float>(s.beta_fast);
  r.beta_slow = static_cast<float>(s.beta_slow);
  r.mscale = static_cast<float>(s.mscale);
  r.mscale_all_dim = static_cast<float>(s.mscale_all_dim);
  // Defaults of mlx-lm's constructors: Llama3RoPE 8192, YarnRoPE 4096; phi3 takes the top-level
  // original_max_position_embeddings.
  double orig = s.original_max_position_embeddings;
  if (type == "su" || type == "longrope") orig = c.original_max_position_embeddings;
  if (orig <= 0) orig = type == "llama3" ? 8192 : 4096;
  r.original_max_position_embeddings = static_cast<float>(orig);
  return ops::make_rope(e.backend(), dims, static_cast<float>(base), c.rope_traditional, &r,
                        static_cast<float>(c.max_position_embeddings));
}

}  // namespace mlxcel::models
