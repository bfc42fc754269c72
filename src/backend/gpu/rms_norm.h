#pragma once
// GPU RMSNorm entry points (vendor-neutral). Pointers are device memory; semantics match
// backend/cpu/rms_norm.h exactly, which is the oracle in tests/backend/test_rms_norm.cpp.
#include <cstdint>

#include "backend/gpu/runtime.h"
#include "core/dtype.h"

namespace mlxcel::gpu {

void rms_norm(const void* x, const void* w, void* y, std::int64_t rows, std::int64_t cols,
              std::int64_t x_row_stride, float eps, DType dtype, const Stream& stream);

void add_rms_norm(const void* x, const void* residual, const void* w, void* y,
                  void* residual_out, std::int64_t rows, std::int64_t cols, float eps,
                  DType dtype, const Stream& stream);

}  // namespace mlxcel::gpu
