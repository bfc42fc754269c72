#include "models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace mlxcel::models {

void Rope::apply(float* x, std::int64_t pos) const {
  const int half = dims / 2;
  for (int i = 0; i < dims; ++i) x[i] *= input_scale;
  for (int i = 0; i < half; ++i) {
    const float theta = static_cast<float>(pos) * scale * inv_freq[i];
    const float c = std::cos(theta), s = std::sin(theta);
    float& a = traditional ? x[2 * i] : x[i];
    float& b = traditional ? x[2 * i + 1] : x[i + half];
    const float a0 = a, b0 = b;
    a = a0 * c - b0 * s;
    b = a0 * s + b0 * c;
  }
}

Rope make_rope(const ModelConfig& c, int dims, double base, bool use_scaling) {
  Rope r;
  r.dims = dims;
  r.traditional = c.rope_traditional;
  const int half = dims / 2;
  std::vector<double> freqs(static_cast<std::size_t>(half));  // wavelengths / (2 pi)
  for (int i = 0; i < half; ++i) freqs[i] = std::pow(base, (2.0 * i) / dims);
  const RopeScaling& s = c.rope_scaling;
  const std::string type = use_scaling ? s.type : "";
  if (type == "linear") {
    r.scale = static_cast<float>(1.0 / s.factor);
  } else if (type == "llama3") {
    const double old_ctx = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings : 8192;
    const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
    for (auto& f : freqs) {
      const double wl = 2 * std::numbers::pi * f;
      double nf = wl > low_wl ? f * s.factor : f;
      if (wl > high_wl && wl < low_wl) {
        const double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        nf = nf / ((1 - smooth) / s.factor + smooth);
      }
      f = nf;
    }
  } else if (type == "longrope" || type == "su") {
    // Phi-3 SuScaledRoPE: long factors always (mlx-lm), mscale from the context ratio.
    MLXCEL_CHECK(static_cast<int>(s.long_factor.size()) == half, ErrorCategory::kBadInput,
                 "rope_scaling.long_factor must have " + std::to_string(half) + " entries");
    for (int i = 0; i < half; ++i) freqs[i] *= s.long_factor[i];
    const double orig = c.original_max_position_embeddings > 0 ? c.original_max_position_embeddings : 4096;
    const double factor = c.max_position_embeddings / orig;
    r.input_scale = factor <= 1.0 ? 1.0f
                                  : static_cast<float>(std::sqrt(1 + std::log(factor) / std::log(orig)));
  } else if (type == "yarn") {
    const double orig = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings : 4096;
    auto corr_dim = [&](double rot) {
      return dims * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(base));
    };
    double low = std::max(0.0, std::floor(corr_dim(s.beta_fast)));
    double high = std::min(static_cast<double>(dims - 1), std::ceil(corr_dim(s.beta_slow)));
    if (low == high) high += 0.001;
    auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
    r.input_scale = static_cast<float>(get_mscale(s.factor, s.mscale) / get_mscale(s.factor, s.mscale_all_dim));
    for (int i = 0; i < half; ++i) {
      const double extra = freqs[i], inter = s.factor * extra;
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double mask = 1.0 - ramp;
      freqs[i] = (inter * extra) / (inter * mask + extra * (1 - mask));
    }
  }
  r.inv_freq.resize(static_cast<std::size_t>(half));
  // mx.fast.rope computes in fp32 from fp32 freqs.
  for (int i = 0; i < half; ++i) r.inv_freq[i] = 1.0f / static_cast<float>(freqs[i]);
  return r;
}

}  // namespace mlxcel::models
