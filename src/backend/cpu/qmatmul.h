#pragma once
// Quantized matmul on the CPU for MLX-format weights (transpose=True, nn.QuantizedLinear):
//   y[M, N] = x[M, K] · dequant(W)[N, K]^T (+ bias)
// qmatmul is a fused dequant + dot: W is never materialized in fp32. For each output and each
// quantization group g it forms d = Σ_{k∈g} x_k·q_k in fp32 (q the integer code for affine, the
// E2M1 / E4M3 element for the fp modes), then acc += scale_g·d, and for affine adds
// Σ_g bias_g·Σ_{k∈g} x_k (the group sums of x are computed once per x row); mathematically
// Σ_k x_k·(scale·q_k + bias). Activations stay fp32, accumulation is fp32 with FMA.
//
// Row-stable: y[m][n] is bit-identical whatever M is, whichever row m it is and however the
// work is split over threads (the chain is fixed by x row m and W row n alone, see
// backend/cpu/dot_kernels.h), so batching requests never changes their results.
//
// AVX2 decodes every mode in registers; the scalar ISA decodes a block of rows to fp32 q values
// first (qmatmul_predecoded), with the same chain and lane order, so on AVX2 both paths give
// identical bits. qmatmul_unfused (decode rows to
// scale * q + bias, then the dense matmul) is the unfused twin: a fallback and oracle.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

enum class QMode : std::uint8_t { kAffine = 0, kMxfp4 = 1, kMxfp8 = 2, kNvfp4 = 3 };

struct QWeight {
  const std::uint32_t* w = nullptr;  // [N, K*bits/32]
  const void* scales = nullptr;      // [N, K/gs]: F32/F16/BF16 (affine) or U8 (fp modes)
  DType scales_dtype = DType::kF32;
  const void* biases = nullptr;  // affine only, scales dtype
  QMode mode = QMode::kAffine;
  int bits = 4;
  int group_size = 64;
  std::int64_t n = 0, k = 0;
};

// Decodes rows [r0, r1) into out[(r - r0) * k + j]: scale * q + bias (unfused) for affine
// (MLX_FORMATS.md §1.3), elem * scale for the fp modes; bit-identical to quant::decode_row_f32.
void qdecode_rows(const QWeight& q, std::int64_t r0, std::int64_t r1, float* out,
                  CpuIsa isa = active_isa());

// x, y fp32 with row strides k and n; bias fp32 [N] or nullptr. K must be a multiple of the
// group size (>= 16, itself a multiple of 16).
void qmatmul(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y,
             CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);
// The same chain with W predecoded to fp32 q values (what the scalar ISA runs); the tests check
// that it matches qmatmul bit for bit.
void qmatmul_predecoded(const QWeight& q, const float* x, std::int64_t m, const float* bias,
                        float* y, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);
// Unfused twin: qdecode_rows into fp32 row blocks, then matmul.
void qmatmul_unfused(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y,
                     CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
