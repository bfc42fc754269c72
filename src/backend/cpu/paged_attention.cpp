#include "backend/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/avx2/attention_kernels.h"
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

namespace {

template <typename T>
float dot_scalar(const float* q, const T* k, int d) {
  float s = 0.0f;
  for (int i = 0; i < d; ++i) s += q[i] * to_f32(k[i]);
  return s;
}

float dot(const float* q, const void* k, DType t, int d, bool avx) {
  if (avx) return avx2::attn_dot(q, k, t, d);
  switch (t) {
    case DType::kBF16: return dot_scalar(q, static_cast<const bf16*>(k), d);
    case DType::kF16: return dot_scalar(q, static_cast<const f16*>(k), d);
    default: return dot_scalar(q, static_cast<const float*>(k), d);
  }
}

void accumulate(float c, float p, const void* v, DType t, float* acc, int d, bool avx) {
  if (avx) return avx2::attn_accumulate(c, p, v, t, acc, d);
  for (int i = 0; i < d; ++i) acc[i] = acc[i] * c + p * load(v, t, i);
}

}  // namespace

void paged_attention(const float* q, int n_heads, const PagedKv& kv, std::int64_t pos,
                     std::int64_t window, float scale, float* out, int head_begin, int head_end,
                     CpuIsa isa) {
  if (head_end < 0) head_end = n_heads;
  const bool avx = isa == CpuIsa::kAvx2;
  const int group = n_heads / kv.n_kv_heads;
  const std::int64_t first = window > 0 ? std::max<std::int64_t>(0, pos - window + 1) : 0;
  const std::size_t elem = dtype_size(kv.dtype);
  const int nh = head_end - head_begin;
  std::vector<float> acc(static_cast<std::size_t>(nh) * kv.v_dim), m(nh), l(nh);
  std::fill(m.begin(), m.end(), -std::numeric_limits<float>::infinity());
  // Keys outer, heads inner: the query heads sharing a KV head (GQA) read each K/V row once.
  for (std::int64_t j = first; j <= pos; ++j) {
    const std::int64_t blk = j / kv.block_size, off = j % kv.block_size;
    const char* kb = static_cast<const char*>(kv.k_blocks[blk]);
    const char* vb = static_cast<const char*>(kv.v_blocks[blk]);
    for (int i = 0; i < nh; ++i) {
      const int h = head_begin + i;
      const int g = h / group;
      const void* krow = kb + ((static_cast<std::int64_t>(g) * kv.block_size + off) * kv.head_dim) * elem;
      const void* vrow = vb + ((static_cast<std::int64_t>(g) * kv.block_size + off) * kv.v_dim) * elem;
      const float s = dot(q + static_cast<std::int64_t>(h) * kv.head_dim, krow, kv.dtype, kv.head_dim, avx) * scale;
      // Online softmax (Milakov & Gimelshein): rescale the running sums when the max grows.
      float c = 1.0f;
      if (s > m[i]) {
        c = std::exp(m[i] - s);
        l[i] *= c;
        m[i] = s;
      }
      const float p = std::exp(s - m[i]);
      l[i] += p;
      accumulate(c, p, vrow, kv.dtype, acc.data() + static_cast<std::size_t>(i) * kv.v_dim, kv.v_dim, avx);
    }
  }
  for (int i = 0; i < nh; ++i) {
    float* oh = out + static_cast<std::int64_t>(head_begin + i) * kv.v_dim;
    const float inv = l[i] > 0 ? 1.0f / l[i] : 0.0f;
    const float* a = acc.data() + static_cast<std::size_t>(i) * kv.v_dim;
    for (int d = 0; d < kv.v_dim; ++d) oh[d] = a[d] * inv;
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
