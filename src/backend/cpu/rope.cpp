#include "backend/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cpu/kernel_util.h"
#include "backend/cpu/mlx_compat.h"

namespace mlxcel::cpu {
namespace {

struct Strides {
  std::int64_t xh, xr, yh, yr;
};

Strides resolve(const RopeArgs& a) {
  Strides s;
  s.xr = a.x_row_stride ? a.x_row_stride : a.head_dim;
  s.xh = a.x_head_stride ? a.x_head_stride : a.seq_len * s.xr;
  s.yr = a.y_row_stride ? a.y_row_stride : a.head_dim;
  s.yh = a.y_head_stride ? a.y_head_stride : a.seq_len * s.yr;
  return s;
}

void validate(const RopeArgs& a) {
  MLXCEL_CHECK(a.x && a.y && a.n_heads >= 0 && a.seq_len >= 0, ErrorCategory::kInternal,
               "rope: bad arguments");
  MLXCEL_CHECK(a.dims > 0 && a.dims % 2 == 0 && a.dims <= a.head_dim, ErrorCategory::kBadInput,
               "rope: dims " + std::to_string(a.dims) + " must be even and <= head_dim " +
                   std::to_string(a.head_dim));
  if (!detail::is_activation_dtype(a.dtype)) detail::unsupported_dtype("rope", a.dtype);
}

// inv_freq_i as MLX's rope computes it: exp(-i * (ln(base) / half)) in f32, or 1 / freqs[i].
void inv_freqs(const RopeArgs& a, float* out) {
  const std::int64_t half = a.dims / 2;
  const float step = std::log(a.base) / static_cast<float>(half);
  for (std::int64_t i = 0; i < half; ++i) {
    const float e = -static_cast<float>(i) * step;
    out[i] = a.freqs ? 1.0f / a.freqs[i] : (a.mlx_numerics ? mlx_compat::exp(e) : std::exp(e));
  }
}

float position(const RopeArgs& a, std::int64_t row) {
  const std::int64_t p = a.positions ? a.positions[row] : a.offset + row;
  return static_cast<float>(p) * a.scale;
}

template <typename T>
void apply_row(const RopeArgs& a, const T* x, T* y, const float* cs, const float* sn) {
  const std::int64_t half = a.dims / 2;
  const float in = a.input_scale;
  const std::int64_t stride = a.traditional ? 1 : half;  // partner of element i
  auto index = [&](std::int64_t i) { return a.traditional ? 2 * i : i; };
  if (a.mlx_numerics) {
    // MLX CPU, half inputs: the input scale is its own op (scalar taking the dtype), cos/sin are
    // rounded, then each product and each sum.
    const DType t = a.mlx_rounding;
    const float ins = mlx_compat::round_to(t, in);
    auto r = [t](float v) { return mlx_compat::round_to(t, v); };
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int64_t j = index(i);
      float x1 = to_f32(x[j]), x2 = to_f32(x[j + stride]);
      if (in != 1.0f) {
        x1 = r(x1 * ins);
        x2 = r(x2 * ins);
      }
      const float c = r(cs[i]), sv = r(sn[i]);
      y[j] = from_f32<T>(r(r(x1 * c) - r(x2 * sv)));
      y[j + stride] = from_f32<T>(r(r(x1 * sv) + r(x2 * c)));
    }
  } else {
    for (std::int64_t i = 0; i < half; ++i) {
      const std::int64_t j = index(i);
      const float x1 = to_f32(x[j]) * in, x2 = to_f32(x[j + stride]) * in;
      y[j] = from_f32<T>(x1 * cs[i] - x2 * sn[i]);
      y[j + stride] = from_f32<T>(x1 * sn[i] + x2 * cs[i]);
    }
  }
  if (static_cast<const void*>(x) != static_cast<void*>(y)) {
    for (std::int64_t i = a.dims; i < a.head_dim; ++i) y[i] = x[i];
  }
}

float pow_f32(float base, float e) { return std::pow(base, e); }

}  // namespace

void rope_ref(const RopeArgs& a) {
  validate(a);
  const Strides s = resolve(a);
  const std::int64_t half = a.dims / 2;
  std::vector<float> inv(static_cast<std::size_t>(half)), cs(inv.size()), sn(inv.size());
  inv_freqs(a, inv.data());
  detail::dispatch_float("rope", a.dtype, [&](auto tag) {
    using T = decltype(tag);
    for (std::int64_t r = 0; r < a.seq_len; ++r) {
      const float p = position(a, r);
      for (std::int64_t i = 0; i < half; ++i) {
        const float theta = p * inv[i];  // f32 angle, as MLX computes it
        cs[i] = static_cast<float>(std::cos(static_cast<double>(theta)));
        sn[i] = static_cast<float>(std::sin(static_cast<double>(theta)));
      }
      for (std::int64_t h = 0; h < a.n_heads; ++h) {
        apply_row(a, static_cast<const T*>(a.x) + h * s.xh + r * s.xr,
                  static_cast<T*>(a.y) + h * s.yh + r * s.yr, cs.data(), sn.data());
      }
    }
  });
}

void rope(const RopeArgs& a, CpuIsa isa, ThreadPool* pool_ptr) {
  validate(a);
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               "rope: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  const Strides s = resolve(a);
  const std::int64_t half = a.dims / 2;
  ThreadPool& pool = pool_or_default(pool_ptr);
  std::vector<float> inv(static_cast<std::size_t>(half));
  inv_freqs(a, inv.data());
  // cos/sin once per row, shared by every head.
  std::vector<float> table(static_cast<std::size_t>(a.seq_len * 2 * half));
  pool.parallel_for(a.seq_len, std::max<std::int64_t>(1, 1024 / half), [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const float p = position(a, r);
      float* cs = &table[r * 2 * half];
      for (std::int64_t i = 0; i < half; ++i) {
        const float theta = p * inv[i];
        cs[i] = a.mlx_numerics ? mlx_compat::cos(theta) : std::cos(theta);
        cs[half + i] = a.mlx_numerics ? mlx_compat::sin(theta) : std::sin(theta);
      }
    }
  });
  detail::dispatch_float("rope", a.dtype, [&](auto tag) {
    using T = decltype(tag);
    const std::int64_t total = a.n_heads * a.seq_len;
    pool.parallel_for(total, std::max<std::int64_t>(1, 4096 / a.head_dim), [&](std::int64_t b, std::int64_t e) {
      for (std::int64_t t = b; t < e; ++t) {
        const std::int64_t h = t / a.seq_len, r = t % a.seq_len;
        const float* cs = &table[r * 2 * half];
        apply_row(a, static_cast<const T*>(a.x) + h * s.xh + r * s.xr,
                  static_cast<T*>(a.y) + h * s.yh + r * s.yr, cs, cs + half);
      }
    });
  });
}

std::vector<float> rope_freqs_default(std::int64_t dims, float base) {
  std::vector<float> f(static_cast<std::size_t>(dims / 2));
  for (std::int64_t i = 0; i < dims / 2; ++i)
    f[i] = pow_f32(base, static_cast<float>(2 * i) / static_cast<float>(dims));
  return f;
}

std::vector<float> rope_freqs_llama3(std::int64_t dims, float base, float factor,
                                     float low_freq_factor, float high_freq_factor,
                                     float original_max_position_embeddings) {
  const float old_ctx = original_max_position_embeddings;
  const float low_freq_wavelen = old_ctx / low_freq_factor;
  const float high_freq_wavelen = old_ctx / high_freq_factor;
  const float two_pi = static_cast<float>(2.0 * 3.141592653589793);
  std::vector<float> f = rope_freqs_default(dims, base);
  for (float& v : f) {
    const float wavelen = two_pi * v;
    const float scaled = wavelen > low_freq_wavelen ? v * factor : v;
    const bool medium = wavelen > high_freq_wavelen && wavelen < low_freq_wavelen;
    if (medium) {
      const float smooth = (old_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      v = scaled / ((1.0f - smooth) / factor + smooth);
    } else {
      v = scaled;
    }
  }
  return f;
}

std::vector<float> rope_freqs_su(std::int64_t dims, float base,
                                 const std::vector<float>& long_factor) {
  MLXCEL_CHECK(long_factor.size() == 1 || static_cast<std::int64_t>(long_factor.size()) == dims / 2,
               ErrorCategory::kBadInput,
               "rope_scaling.long_factor has " + std::to_string(long_factor.size()) +
                   " entries; the rotary dims need " + std::to_string(dims / 2));
  std::vector<float> f = rope_freqs_default(dims, base);
  for (std::size_t i = 0; i < f.size(); ++i)
    f[i] *= long_factor.size() == 1 ? long_factor[0] : long_factor[i];
  return f;
}

float rope_su_mscale(float max_position_embeddings, float original_max_position_embeddings,
                     std::optional<float> long_mscale) {
  if (long_mscale && *long_mscale != 0.0f) return *long_mscale;
  const double factor = static_cast<double>(max_position_embeddings) / original_max_position_embeddings;
  if (factor <= 1.0) return 1.0f;
  return static_cast<float>(
      std::sqrt(1.0 + std::log(factor) / std::log(static_cast<double>(original_max_position_embeddings))));
}

std::vector<float> rope_freqs_yarn(std::int64_t dims, float base, float scaling_factor,
                                   float original_max_position_embeddings, float beta_fast,
                                   float beta_slow) {
  const double pi = 3.141592653589793;
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dims) *
            std::log(static_cast<double>(original_max_position_embeddings) / (rotations * 2 * pi))) /
           (2 * std::log(static_cast<double>(base)));
  };
  double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), static_cast<double>(dims - 1));
  if (low == high) high += 0.001;  // as mlx-lm: avoid a zero-width ramp
  const float lo = static_cast<float>(low), span = static_cast<float>(high - low);
  std::vector<float> extra = rope_freqs_default(dims, base);
  std::vector<float> f(extra.size());
  for (std::size_t i = 0; i < f.size(); ++i) {
    const float inter = scaling_factor * extra[i];
    const float ramp = std::clamp((static_cast<float>(i) - lo) / span, 0.0f, 1.0f);
    const float mask = 1.0f - ramp;
    f[i] = (inter * extra[i]) / (inter * mask + extra[i] * (1.0f - mask));
  }
  return f;
}

float rope_yarn_mscale(float scaling_factor, float mscale, float mscale_all_dim) {
  auto get = [&](double m) {
    return scaling_factor <= 1.0f ? 1.0 : 0.1 * m * std::log(static_cast<double>(scaling_factor)) + 1.0;
  };
  return static_cast<float>(get(mscale) / get(mscale_all_dim));
}

void RopePlan::apply_to(RopeArgs& a) const {
  a.dims = dims;
  a.traditional = traditional;
  a.base = base;
  a.scale = scale;
  a.input_scale = input_scale;
  a.freqs = freqs.empty() ? nullptr : freqs.data();
}

RopePlan make_rope_plan(std::int64_t dims, float base, bool traditional,
                        const RopeScaling* scaling, float max_position_embeddings) {
  RopePlan p;
  p.dims = dims;
  p.traditional = traditional;
  p.base = base;
  const std::string type = scaling ? scaling->type : "default";
  if (type == "default") return p;
  if (type == "linear") {
    p.scale = 1.0f / scaling->factor;
  } else if (type == "llama3") {
    p.freqs = rope_freqs_llama3(dims, base, scaling->factor, scaling->low_freq_factor,
                                scaling->high_freq_factor,
                                scaling->original_max_position_embeddings);
  } else if (type == "su" || type == "longrope") {
    // SuScaledRoPE is always the split-halves form.
    p.traditional = false;
    p.freqs = rope_freqs_su(dims, base, scaling->long_factor);
    p.input_scale = rope_su_mscale(max_position_embeddings,
                                   scaling->original_max_position_embeddings, scaling->long_mscale);
  } else if (type == "yarn") {
    p.freqs = rope_freqs_yarn(dims, base, scaling->factor, scaling->original_max_position_embeddings,
                              scaling->beta_fast, scaling->beta_slow);
    p.input_scale = rope_yarn_mscale(scaling->factor, scaling->mscale, scaling->mscale_all_dim);
  } else {
    throw_error(ErrorCategory::kUnsupported,
                "rope_scaling type '" + type +
                    "' is not supported (known: default, linear, llama3, su, longrope, yarn)");
  }
  return p;
}

}  // namespace mlxcel::cpu
