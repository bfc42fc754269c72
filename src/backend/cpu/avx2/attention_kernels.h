#pragma once
// AVX2 row kernels of the paged decode attention (backend/cpu/paged_attention.cpp). K/V rows are
// F32, BF16 or F16 (the KV cache dtype); q and the accumulator are fp32.
#include <cstdint>

#include "core/dtype.h"

namespace mlxcel::cpu::avx2 {

// Σ q[i] * k[i] over d elements.
float attn_dot(const float* q, const void* k, DType t, int d);
// acc[i] = acc[i] * c + p * v[i] over d elements (c rescales the running sum of the online
// softmax; 1 when the maximum did not move).
void attn_accumulate(float c, float p, const void* v, DType t, float* acc, int d);

}  // namespace mlxcel::cpu::avx2
