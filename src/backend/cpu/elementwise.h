#pragma once
// Elementwise ops on contiguous buffers of one dtype (F32/BF16/F16), f32 inside:
//   add: y = a + b,  mul: y = a * b,  scale: y = a * alpha (b unused).
// In-place (y == a or y == b) is allowed.
#include <cstdint>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/dtype.h"

namespace mlxcel::cpu {

enum class BinaryKind : std::uint8_t { kAdd = 0, kMul = 1, kScale = 2 };

void binary_ref(BinaryKind kind, const void* a, const void* b, void* y, DType dtype,
                std::int64_t n, float alpha = 1.0f);
void binary(BinaryKind kind, const void* a, const void* b, void* y, DType dtype, std::int64_t n,
            float alpha = 1.0f, CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

inline void add(const void* a, const void* b, void* y, DType t, std::int64_t n,
                CpuIsa isa = active_isa()) {
  binary(BinaryKind::kAdd, a, b, y, t, n, 1.0f, isa);
}
inline void mul(const void* a, const void* b, void* y, DType t, std::int64_t n,
                CpuIsa isa = active_isa()) {
  binary(BinaryKind::kMul, a, b, y, t, n, 1.0f, isa);
}
inline void scale(const void* a, float alpha, void* y, DType t, std::int64_t n,
                  CpuIsa isa = active_isa()) {
  binary(BinaryKind::kScale, a, nullptr, y, t, n, alpha, isa);
}

// Dtype conversion between F32, BF16 and F16 (round to nearest even; same bits as
// bf16::from_float / f16::from_float). src and dst must not overlap unless the dtypes are equal.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n,
             CpuIsa isa = active_isa(), ThreadPool* pool = nullptr);

}  // namespace mlxcel::cpu
