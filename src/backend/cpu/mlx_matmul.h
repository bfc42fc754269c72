#pragma once
// Matmuls with the arithmetic of MLX's CPU backend, for `--numerics mlx` (see models/model.h).
//
// Dense (nn.Linear, x·Wᵀ): MLX 0.32.4 on Linux converts half inputs to fp32 and calls the
// reference BLAS sgemm, which accumulates each output sequentially over K with separate
// multiply and add; `matmul_mlx` returns that fp32 sum (the caller adds a bias and rounds).
//
// Quantized: the arithmetic of MLX's CPU backend (mlx/backend/cpu/quantized.cpp,
// `_qmm_t` and `fp_qmm_t`, checked against mlx 0.32.4 from PyPI by scripts/check_mlx_qmm.py).
// MLX accumulates in the activation dtype T: every product and sum is computed in fp32 and
// rounded to T, and each output runs one sequential chain over K:
//   affine:   sum = T(sum + T(x_k * T(T(scale * q_k) + bias)))
//   fp modes: per group g = T(g + T(x_k * T(lut(q_k)))), then sum = T(sum + T(scale_T * g))
// With T = bfloat16 this is much less accurate than fp32 accumulation (an error of a few bf16
// ulps of the result per layer), so it is not the default: `--numerics mlx` selects it, and the
// model conformance gate uses it to reproduce mlx-lm's CPU logits bit for bit. For T = F32 the
// chain is plain sequential fp32 without FMA contraction.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/qmatmul.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

// x [m, k] fp32 holding values of dtype `act` (F32/F16/BF16); y [m, n] fp32 (values of `act`).
void qmatmul_mlx(const QWeight& q, const float* x, std::int64_t m, DType act, float* y,
                 CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

// x [m, k] fp32, W [n, k] of w_dtype (F32/F16/BF16); y [m, n] fp32, not rounded.
void matmul_mlx(const float* x, std::int64_t m, const void* w, DType w_dtype, std::int64_t n,
                std::int64_t k, float* y, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

// Width of the row tiles the kernels work on (one AVX2 lane per weight row).
inline constexpr std::int64_t kMlxQmmTile = 8;

}  // namespace mlxcel::cpu
