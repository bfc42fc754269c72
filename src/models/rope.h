#pragma once
// Rotary position embedding as mlx-lm builds it (mlx_lm/models/rope_utils.py) on top of
// mx.fast.rope: the first `dims` features of each head rotate by angle pos * scale / freq_i,
// pairs (x[i], x[i + dims/2]) or, when traditional, (x[2i], x[2i+1]). Scaled variants only
// change the per-pair wavelengths `freqs` and an input scale applied before rotation.
#include <cstdint>
#include <vector>

#include "models/model_config.h"

namespace mlxcel::models {

struct Rope {
  int dims = 0;
  bool traditional = false;
  float scale = 1.0f;        // angle multiplier (1/factor for linear scaling)
  float input_scale = 1.0f;  // su/longrope and yarn mscale on the rotated features
  std::vector<float> inv_freq;  // dims/2 entries: 1 / wavelength

  // Rotates one head in place.
  void apply(float* x, std::int64_t pos) const;
};

// The rope of a layer: `base` is rope_theta, or gemma3's rope_local_base_freq on sliding layers
// (which use no scaling).
Rope make_rope(const ModelConfig& c, int dims, double base, bool use_scaling);

}  // namespace mlxcel::models
