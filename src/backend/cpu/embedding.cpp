#include "backend/cpu/embedding.h"

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu {

void embedding_gather(const void* table, DType table_dtype, std::int64_t vocab, std::int64_t dim,
                      const std::int32_t* ids, std::int64_t n_ids, void* y, DType y_dtype,
                      float scale, ThreadPool* pool) {
  if (!detail::is_activation_dtype(table_dtype)) detail::unsupported_dtype("embedding", table_dtype);
  if (!detail::is_activation_dtype(y_dtype)) detail::unsupported_dtype("embedding", y_dtype);
  for (std::int64_t i = 0; i < n_ids; ++i) {
    MLXCEL_CHECK(ids[i] >= 0 && ids[i] < vocab, ErrorCategory::kBadInput,
                 "embedding: token id " + std::to_string(ids[i]) + " at position " +
                     std::to_string(i) + " is outside the vocabulary (size " +
                     std::to_string(vocab) + ")");
  }
  const std::size_t te = dtype_size(table_dtype), ye = dtype_size(y_dtype);
  pool_or_default(pool).parallel_for(n_ids, 4, [&](std::int64_t b, std::int64_t e) {
    std::vector<float> row(static_cast<std::size_t>(dim));
    for (std::int64_t i = b; i < e; ++i) {
      const char* src = static_cast<const char*>(table) + ids[i] * dim * te;
      char* dst = static_cast<char*>(y) + i * dim * ye;
      if (table_dtype == y_dtype && scale == 1.0f) {
        std::memcpy(dst, src, static_cast<std::size_t>(dim) * te);
        continue;
      }
      detail::load_f32(src, table_dtype, row.data(), dim);
      if (scale != 1.0f)
        for (float& v : row) v *= scale;
      detail::store_f32(row.data(), y_dtype, dst, dim);
    }
  });
}

}  // namespace mlxcel::cpu
