#pragma once
// Argmax and top-k over logits rows (for greedy decoding, sampling and trace comparison).
// Ties break toward the lower index (as mx.argmax does). NaN entries are never selected.
// top_k returns the k largest as (index, value) pairs in descending value order.
#include <cstdint>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace mlxcel::cpu {

std::int64_t argmax(const void* logits, DType dtype, std::int64_t n);

struct TopEntry {
  std::int64_t index;
  float value;
};
std::vector<TopEntry> top_k(const void* logits, DType dtype, std::int64_t n, std::int64_t k);

}  // namespace mlxcel::cpu
