#include "backend/cpu/topk.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu {
namespace {

template <typename T>
std::int64_t argmax_t(const T* x, std::int64_t n) {
  std::int64_t best = -1;
  float bv = -std::numeric_limits<float>::infinity();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = to_f32(x[i]);
    if (std::isnan(v)) continue;
    if (best < 0 || v > bv) {
      best = i;
      bv = v;
    }
  }
  return best < 0 ? 0 : best;
}

// Better = larger value, then smaller index.
bool better(const TopEntry& a, const TopEntry& b) {
  return a.value > b.value || (a.value == b.value && a.index < b.index);
}

}  // namespace

std::int64_t argmax(const void* logits, DType dtype, std::int64_t n) {
  return detail::dispatch_float("argmax", dtype, [&](auto tag) {
    using T = decltype(tag);
    return argmax_t(static_cast<const T*>(logits), n);
  });
}

std::vector<TopEntry> top_k(const void* logits, DType dtype, std::int64_t n, std::int64_t k) {
  k = std::max<std::int64_t>(0, std::min(k, n));
  std::vector<TopEntry> heap;  // min-heap on `better`: the worst kept entry on top
  heap.reserve(static_cast<std::size_t>(k) + 1);
  detail::dispatch_float("top_k", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(logits);
    for (std::int64_t i = 0; i < n && k > 0; ++i) {
      const float v = to_f32(x[i]);
      if (std::isnan(v)) continue;
      TopEntry e{i, v};
      if (static_cast<std::int64_t>(heap.size()) < k) {
        heap.push_back(e);
        std::push_heap(heap.begin(), heap.end(), better);
      } else if (better(e, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), better);
        heap.back() = e;
        std::push_heap(heap.begin(), heap.end(), better);
      }
    }
  });
  std::sort(heap.begin(), heap.end(), better);
  return heap;
}

}  // namespace mlxcel::cpu
