#pragma once
// Quantized matmul on the CPU for MLX-format weights (transpose=True, nn.QuantizedLinear):
//   y[M, N] = x[M, K] · dequant(W)[N, K]^T (+ bias)
// Row blocks of W are decoded into an L1/L2-resident fp32 tile (each weight byte read once per
// call) and multiplied with the dense AVX2/scalar kernels; blocks run in parallel on the thread
// pool. Decoding is scale * q + bias in fp32 (unfused) for affine (MLX_FORMATS.md §1.3) and
// elem * scale for the fp modes: bit-identical to the reference quant::decode_row_f32.
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
  const void* biases = nullptr;      // affine only, scales dtype
  QMode mode = QMode::kAffine;
  int bits = 4;
  int group_size = 64;
  std::int64_t n = 0, k = 0;
};

// Decodes rows [r0, r1) into out[(r - r0) * k + j].
void qdecode_rows(const QWeight& q, std::int64_t r0, std::int64_t r1, float* out,
                  CpuIsa isa = active_isa());

// x, y fp32 with row strides k and n; bias fp32 [N] or nullptr.
void qmatmul(const QWeight& q, const float* x, std::int64_t m, const float* bias, float* y,
             CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
