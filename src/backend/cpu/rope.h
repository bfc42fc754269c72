#pragma once
// Rotary position embedding on the CPU with the semantics of MLX mx.fast.rope:
//   for each row at position p (offset + row, or positions[row]) and i < dims/2:
//     theta_i = (p * scale) * inv_freq_i,
//     inv_freq_i = exp(-i * ln(base) / (dims/2))           (base form), or
//     inv_freq_i = 1 / freqs[i]                              (freqs form: Llama 3, su, yarn)
//   traditional = false: rotate pairs (x[i], x[i + dims/2])   (split halves, the HF layout)
//   traditional = true:  rotate pairs (x[2i], x[2i + 1])      (interleaved)
//   (a, b) -> (a cos - b sin, a sin + b cos); features dims..head_dim pass through.
// input_scale multiplies the rotated features before rotation (mlx-lm SuScaledRoPE and YarnRoPE
// scale x[..., :dims] by their mscale). All arithmetic is f32 with one rounding to the output
// dtype; MLX rounds cos/sin and each product to bf16/f16 for half inputs (docs/cpu_backend.md).
//
// Layout: x and y are [n_heads, seq_len, head_dim] with element strides per head and per row
// (head_dim contiguous); mlx-lm's [B, n_heads, L, D] maps to heads = B * n_heads.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

struct RopeArgs {
  const void* x = nullptr;
  void* y = nullptr;  // may equal x
  DType dtype = DType::kF32;
  std::int64_t n_heads = 0, seq_len = 0, head_dim = 0;
  std::int64_t x_head_stride = 0, x_row_stride = 0;  // 0: contiguous [n_heads, seq_len, head_dim]
  std::int64_t y_head_stride = 0, y_row_stride = 0;
  std::int64_t dims = 0;  // rotated features (even, <= head_dim)
  bool traditional = false;
  float base = 10000.0f;
  float scale = 1.0f;
  std::int64_t offset = 0;                 // position of row 0 when positions is null
  const std::int32_t* positions = nullptr;  // [seq_len] per-row positions, or null
  const float* freqs = nullptr;             // [dims/2], or null for the base form
  float input_scale = 1.0f;
  // `--numerics mlx`: MLX's CPU arithmetic. inv_freq uses MLX's exp, cos/sin its Cephes
  // sincos, and every intermediate (input scale, cos, sin, each product and sum) is rounded to
  // `mlx_rounding` (the activation dtype; F32 rounds nothing). Otherwise f32 arithmetic with
  // libm cos/sin and one rounding to `dtype`.
  bool mlx_numerics = false;
  DType mlx_rounding = DType::kF32;
};

void rope_ref(const RopeArgs& a);
// Multithreaded; the cos/sin table is computed once per row and shared by all heads. The same
// code runs for both ISAs (the work is dominated by sin/cos, which we keep at libm accuracy).
void rope(const RopeArgs& a, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

// --- Frequency tables, in mx.fast.rope's `freqs` convention (theta = p * scale / freqs[i]), ---
// --- computed in f32 the way mlx_lm/models/rope_utils.py computes them.                     ---

// base ** (2i / dims): the table of the plain form (only for tests and tools; the base form
// computes inv_freq with exp, as MLX does).
std::vector<float> rope_freqs_default(std::int64_t dims, float base);
// Llama 3: wavelengths above original/low_freq_factor are scaled by factor, those between the
// two cut-offs are smoothly interpolated.
std::vector<float> rope_freqs_llama3(std::int64_t dims, float base, float factor,
                                     float low_freq_factor, float high_freq_factor,
                                     float original_max_position_embeddings);
// su / longrope (Phi-3): long_factor[i] * base ** (2i / dims). mlx-lm 0.32 uses long_factor at
// every sequence length (short_factor is read but unused), so do we.
std::vector<float> rope_freqs_su(std::int64_t dims, float base,
                                 const std::vector<float>& long_factor);
// The su mscale that scales q and k (x[..., :dims]) before rotation: long_mscale if given, else
// sqrt(1 + ln(f) / ln(original)) with f = max / original, or 1 when f <= 1.
float rope_su_mscale(float max_position_embeddings, float original_max_position_embeddings,
                     std::optional<float> long_mscale = std::nullopt);
// YaRN: blend of interpolated and extrapolated frequencies over the correction range.
std::vector<float> rope_freqs_yarn(std::int64_t dims, float base, float scaling_factor,
                                   float original_max_position_embeddings, float beta_fast = 32,
                                   float beta_slow = 1);
// YaRN input scale: get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim).
float rope_yarn_mscale(float scaling_factor, float mscale = 1, float mscale_all_dim = 0);

// config.json rope_scaling, as far as the kernels need it.
struct RopeScaling {
  std::string type = "default";  // "type" or "rope_type": default, linear, llama3, su, longrope, yarn
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  float original_max_position_embeddings = 8192.0f;
  std::vector<float> short_factor, long_factor;
  float beta_fast = 32.0f, beta_slow = 1.0f, mscale = 1.0f, mscale_all_dim = 0.0f;
  std::optional<float> long_mscale;
};

// What mlx-lm's initialize_rope (and phi3's SuScaledRoPE) would build: fill RopeArgs' dims,
// traditional, base, scale, input_scale and point freqs at `freqs` (empty for the base form).
struct RopePlan {
  std::int64_t dims = 0;
  bool traditional = false;
  float base = 10000.0f;
  float scale = 1.0f;
  float input_scale = 1.0f;
  std::vector<float> freqs;
  void apply_to(RopeArgs& a) const;
};
// Throws kUnsupported for a rope type it does not know (naming it).
RopePlan make_rope_plan(std::int64_t dims, float base, bool traditional,
                        const RopeScaling* scaling, float max_position_embeddings);

}  // namespace mlxcel::cpu
