#include "backend/cpu/elementwise.h"

#include <algorithm>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu {

void binary_ref(BinaryKind kind, const void* a, const void* b, void* y, DType dtype,
                std::int64_t n, float alpha) {
  detail::dispatch_float("binary", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* as = static_cast<const T*>(a);
    const T* bs = static_cast<const T*>(b);
    T* ys = static_cast<T*>(y);
    for (std::int64_t i = 0; i < n; ++i) {
      float v = to_f32(as[i]);
      switch (kind) {
        case BinaryKind::kAdd: v += to_f32(bs[i]); break;
        case BinaryKind::kMul: v *= to_f32(bs[i]); break;
        case BinaryKind::kScale: v *= alpha; break;
      }
      ys[i] = from_f32<T>(v);
    }
  });
}

void binary(BinaryKind kind, const void* a, const void* b, void* y, DType dtype, std::int64_t n,
            float alpha, CpuIsa isa, ThreadPool* pool) {
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               "binary: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  if (!detail::is_activation_dtype(dtype)) detail::unsupported_dtype("binary", dtype);
  const std::size_t es = dtype_size(dtype);
  pool_or_default(pool).parallel_for(n, 16384, [&](std::int64_t s, std::int64_t e) {
    const void* as = static_cast<const char*>(a) + s * es;
    const void* bs = b ? static_cast<const char*>(b) + s * es : nullptr;
    void* ys = static_cast<char*>(y) + s * es;
    if (isa == CpuIsa::kAvx2) avx2::binary_rows(static_cast<int>(kind), as, bs, ys, dtype, e - s, alpha);
    else binary_ref(kind, as, bs, ys, dtype, e - s, alpha);
  });
}

void convert(const void* src, DType st, void* dst, DType dt, std::int64_t n, CpuIsa isa,
             ThreadPool* pool) {
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               "convert: AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
  if (!detail::is_activation_dtype(st)) detail::unsupported_dtype("convert", st);
  if (!detail::is_activation_dtype(dt)) detail::unsupported_dtype("convert", dt);
  const std::size_t se = dtype_size(st), de = dtype_size(dt);
  constexpr std::int64_t kChunk = 4096;
  pool_or_default(pool).parallel_for(n, 16384, [&](std::int64_t b, std::int64_t e) {
    float tmp[kChunk];
    for (std::int64_t i = b; i < e; i += kChunk) {
      const std::int64_t len = std::min(kChunk, e - i);
      const void* s = static_cast<const char*>(src) + i * se;
      void* d = static_cast<char*>(dst) + i * de;
      if (isa == CpuIsa::kAvx2) {
        avx2::convert_to_f32(s, st, tmp, len);
        avx2::convert_from_f32(tmp, dt, d, len);
      } else {
        detail::load_f32(s, st, tmp, len);
        detail::store_f32(tmp, dt, d, len);
      }
    }
  });
}

}  // namespace mlxcel::cpu
