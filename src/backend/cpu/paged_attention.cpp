#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/mlx_compat.h"

namespace mlxcel::cpu {
namespace {

inline float load(const void* base, DType t, std::int64_t i) {
  switch (t) {
    case DType::kBF16: return static_cast<const bf16*>(base)[i].to_float();
    case DType::kF16: return static_cast<const f16*>(base)[i].to_float();
    default: return static_cast<const float*>(base)[i];
  }
}

inline void store(void* base, DType t, std::int64_t i, float v) {
  switch (t) {
    case DType::kBF16: static_cast<bf16*>(base)[i] = bf16(v); break;
    case DType::kF16: static_cast<f16*>(base)[i] = f16(v); break;
    default: static_cast<float*>(base)[i] = v; break;
  }
}

}  // namespace

void paged_kv_write(const PagedKv& kv, std::int64_t pos, const float* k, const float* v) {
  const std::int64_t blk = pos / kv.block_size, off = pos % kv.block_size;
  void* kb = kv.k_blocks[blk];
  void* vb = kv.v_blocks[blk];
  for (int g = 0; g < kv.n_kv_heads; ++g) {
    const std::int64_t kbase = (static_cast<std::int64_t>(g) * kv.block_size + off) * kv.head_dim;
    const std::int64_t vbase = (static_cast<std::int64_t>(g) * kv.block_size + off) * kv.v_dim;
    for (int d = 0; d < kv.head_dim; ++d) store(kb, kv.dtype, kbase + d, k[g * kv.head_dim + d]);
    for (int d = 0; d < kv.v_dim; ++d) store(vb, kv.dtype, vbase + d, v[g * kv.v_dim + d]);
  }
}

void paged_attention(const float* q, int n_heads, const PagedKv& kv, std::int64_t pos,
                     std::int64_t window, float scale, float* out, int head_begin, int head_end) {
  if (head_end < 0) head_end = n_heads;
  const int group = n_heads / kv.n_kv_heads;
  const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, pos - window + 1) : 0;
  std::vector<float> acc(static_cast<std::size_t>(kv.v_dim));
  for (int h = head_begin; h < head_end; ++h) {
    const int g = h / group;
    const float* qh = q + static_cast<std::int64_t>(h) * kv.head_dim;
    float m = -std::numeric_limits<float>::infinity();
    float l = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (std::int64_t j = first; j <= pos; ++j) {
      const std::int64_t blk = j / kv.block_size, off = j % kv.block_size;
      const void* kb = kv.k_blocks[blk];
      const void* vb = kv.v_blocks[blk];
      const std::int64_t kbase = (static_cast<std::int64_t>(g) * kv.block_size + off) * kv.head_dim;
      float s = 0.0f;
      for (int d = 0; d < kv.head_dim; ++d) s += qh[d] * load(kb, kv.dtype, kbase + d);
      s *= scale;
      // Online softmax (Milakov & Gimelshein): rescale the running sum when the max grows.
      if (s > m) {
        const float c = std::exp(m - s);
        l *= c;
        for (auto& a : acc) a *= c;
        m = s;
      }
      const float p = std::exp(s - m);
      l += p;
      const std::int64_t vbase = (static_cast<std::int64_t>(g) * kv.block_size + off) * kv.v_dim;
      for (int d = 0; d < kv.v_dim; ++d) acc[d] += p * load(vb, kv.dtype, vbase + d);
    }
    float* oh = out + static_cast<std::int64_t>(h) * kv.v_dim;
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < kv.v_dim; ++d) oh[d] = acc[d] * inv;
  }
}

void paged_attention_mlx(const float* q, int n_heads, const PagedKv& kv, std::int64_t pos,
                         std::int64_t window, float scale, DType t, float* out, int head_begin,
                         int head_end, const std::int64_t* order, std::int64_t order_len) {
  using mlx_compat::round_to;
  const int group = n_heads / kv.n_kv_heads;
  const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, pos - window + 1) : 0;
  std::vector<std::int64_t> keys;
  if (order) keys.assign(order, order + order_len);
  else
    for (std::int64_t j = first; j <= pos; ++j) keys.push_back(j);
  const std::size_t n = keys.size();
  std::vector<float> qs(static_cast<std::size_t>(kv.head_dim)), s(n), o(static_cast<std::size_t>(kv.v_dim));
  const float sc = round_to(t, scale);
  auto row = [&](const void* const* blocks, int dim, std::int64_t j, int g, int d) {
    const std::int64_t blk = j / kv.block_size, off = j % kv.block_size;
    return load(blocks[blk], kv.dtype, (static_cast<std::int64_t>(g) * kv.block_size + off) * dim + d);
  };
  for (int h = head_begin; h < head_end; ++h) {
    const int g = h / group;
    const float* qh = q + static_cast<std::int64_t>(h) * kv.head_dim;
    for (int d = 0; d < kv.head_dim; ++d) qs[d] = round_to(t, qh[d] * sc);
    float m = -std::numeric_limits<float>::infinity();
    for (std::size_t i = 0; i < n; ++i) {
      float dot = 0.0f;
      for (int d = 0; d < kv.head_dim; ++d) dot = dot + qs[d] * row(kv.k_blocks, kv.head_dim, keys[i], g, d);
      s[i] = round_to(t, dot);
      m = std::max(m, s[i]);
    }
    float z = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      s[i] = mlx_compat::exp(s[i] - m);
      z = z + s[i];
    }
    const float inv = 1.0f / z;
    for (std::size_t i = 0; i < n; ++i) s[i] = round_to(t, s[i] * inv);
    std::fill(o.begin(), o.end(), 0.0f);
    for (std::size_t i = 0; i < n; ++i)
      for (int d = 0; d < kv.v_dim; ++d) o[d] = o[d] + s[i] * row(kv.v_blocks, kv.v_dim, keys[i], g, d);
    float* oh = out + static_cast<std::int64_t>(h) * kv.v_dim;
    for (int d = 0; d < kv.v_dim; ++d) oh[d] = round_to(t, o[d]);
  }
}

}  // namespace mlxcel::cpu
