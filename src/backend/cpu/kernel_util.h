#pragma once
// Internal helpers shared by the CPU kernels (not a public API): dtype dispatch for the three
// activation dtypes and a checked error for anything else.
#include <cstdint>
#include <string>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace mlxcel::cpu::detail {

[[noreturn]] inline void unsupported_dtype(const char* op, DType t) {
  throw_error(ErrorCategory::kUnsupported, std::string(op) + ": dtype " +
                                               std::string(dtype_name(t)) +
                                               " is not supported (use F32, BF16 or F16)");
}

// Calls fn(T{}) with T = float, bf16 or f16 for `t`.
template <typename Fn>
decltype(auto) dispatch_float(const char* op, DType t, Fn&& fn) {
  switch (t) {
    case DType::kF32: return fn(float{});
    case DType::kBF16: return fn(bf16{});
    case DType::kF16: return fn(f16{});
    default: unsupported_dtype(op, t);
  }
}

template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, bf16>) return DType::kBF16;
  else if constexpr (std::is_same_v<T, f16>) return DType::kF16;
  else return DType::kF32;
}

inline bool is_activation_dtype(DType t) {
  return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16;
}

// Converts n values of dtype t at src to f32.
inline void load_f32(const void* src, DType t, float* dst, std::int64_t n) {
  dispatch_float("load_f32", t, [&](auto tag) {
    using T = decltype(tag);
    const T* s = static_cast<const T*>(src);
    for (std::int64_t i = 0; i < n; ++i) dst[i] = to_f32(s[i]);
  });
}

inline void store_f32(const float* src, DType t, void* dst, std::int64_t n) {
  dispatch_float("store_f32", t, [&](auto tag) {
    using T = decltype(tag);
    T* d = static_cast<T*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = from_f32<T>(src[i]);
  });
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace mlxcel::cpu::detail
