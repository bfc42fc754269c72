#pragma once
// Scaled dot-product attention on the CPU, the semantics of mx.fast.scaled_dot_product_attention:
//   out[h, i] = sum_j softmax_j(scale * q[h, i] · k[h / G, j] + mask(i, j)) v[h / G, j]
// with G = n_heads / n_kv_heads (GQA), for prefill (q_len > 1) and decode (q_len = 1).
// Masking, in absolute positions: query row i sits at position q_offset + i; key j at position j.
//   causal: j <= q_offset + i  (mask="causal" in MLX aligns the last query with the last key,
//           i.e. q_offset = kv_len - q_len)
//   window (> 0): additionally q_offset + i - j < window, mlx-lm's create_causal_mask
//           (linds < rinds + window_size) for sliding-window layers.
// K and V are views into a KV cache laid out [n_kv_heads, capacity, head_dim]: give the head
// and row strides (elements) and kv_len valid rows. q and out are [n_heads, q_len, head_dim]
// with their own strides, so out can be written straight into an [L, n_heads * head_dim] buffer.
// All four share one dtype (F32/BF16/F16); scores, softmax and the V sum are f32.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* out = nullptr;
  DType dtype = DType::kF32;
  std::int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  std::int64_t q_len = 0, kv_len = 0, q_offset = 0;
  bool causal = true;
  std::int64_t window = 0;  // 0: no sliding window
  float scale = 1.0f;
  // Element strides; 0 means contiguous ([heads, rows, head_dim] with rows = q_len or kv_len).
  std::int64_t q_head_stride = 0, q_row_stride = 0;
  std::int64_t k_head_stride = 0, k_row_stride = 0;
  std::int64_t v_head_stride = 0, v_row_stride = 0;
  std::int64_t o_head_stride = 0, o_row_stride = 0;
};

// Oracle: full score rows, double-precision softmax and V sum.
void attention_ref(const AttentionArgs& a);
// Optimized: one task per (KV head, query row) covering that KV head's G query heads (each block
// of 64 keys/values is converted once and used by all G), or per (query head, row) when there are
// too few KV heads x rows to keep the threads busy; online (running max) softmax over the
// blocks, so memory is O(block) whatever kv_len is. Fully masked query rows give zeros.
void attention(const AttentionArgs& a, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
