#pragma once
// Embedding gather for float tables: y[i, :] = table[ids[i], :] * scale, converted from the
// table's dtype to y's dtype (F32/BF16/F16 both). scale = 1 copies; Gemma multiplies by
// sqrt(hidden_size) (mlx-lm rounds that constant to the activation dtype first; pass the rounded
// value to match). An id outside [0, vocab) is kBadInput naming the id and the vocab size.
#include <cstdint>

#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

void embedding_gather(const void* table, DType table_dtype, std::int64_t vocab, std::int64_t dim,
                      const std::int32_t* ids, std::int64_t n_ids, void* y, DType y_dtype,
                      float scale = 1.0f, ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
