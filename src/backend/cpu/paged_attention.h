#pragma once
// Attention of one query token against a sequence's paged KV cache (runtime/kv_cache.h layout:
// per block and layer, K [n_kv_heads, block_size, head_dim] and V [n_kv_heads, block_size,
// v_dim]). Causal with an optional sliding window: the query at absolute position `pos` sees
// keys j with j <= pos and pos - j < window (window 0 = unlimited), as mlx-lm's masks do.
// GQA: query head h reads KV head h / (n_heads / n_kv_heads). One pass with an online softmax
// in fp32, so memory does not grow with the context; the query heads of one KV head read each
// K/V row once. AVX2 dot products and accumulation with a scalar twin.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

struct PagedKv {
  void* const* k_blocks = nullptr;  // this layer's K block pointers, in sequence order
  void* const* v_blocks = nullptr;
  int block_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int v_dim = 0;
  DType dtype = DType::kF32;  // F32, BF16 or F16
};

// q: [n_heads, head_dim] fp32; out: [n_heads, v_dim] fp32. Heads in [head_begin, head_end).
void paged_attention(const float* q, int n_heads, const PagedKv& kv, std::int64_t pos,
                     std::int64_t window, float scale, float* out, int head_begin = 0,
                     int head_end = -1, CpuIsa isa = active_isa());

// The same attention with MLX's CPU arithmetic for `--numerics mlx` (mx.fast.
// scaled_dot_product_attention falls back to ops there): q is scaled by the scale rounded to t,
// each score is a sequential fp32 dot product rounded to t, the softmax is fp32 (MLX's exp,
// sequential normalizer, multiplied by its reciprocal) rounded to t, and each output element is
// a sequential fp32 sum over the keys rounded to t. Keys are visited in `order` when given (the
// slot order of mlx-lm's rotating cache for sliding windows), else in position order.
void paged_attention_mlx(const float* q, int n_heads, const PagedKv& kv, std::int64_t pos,
                         std::int64_t window, float scale, DType t, float* out, int head_begin,
                         int head_end, const std::int64_t* order = nullptr,
                         std::int64_t order_len = 0);

// Writes one token's K and V rows ([n_kv_heads, head_dim], [n_kv_heads, v_dim], fp32) into its
// slot, converting to the cache dtype.
void paged_kv_write(const PagedKv& kv, std::int64_t pos, const float* k, const float* v);

}  // namespace mlxcel::cpu
