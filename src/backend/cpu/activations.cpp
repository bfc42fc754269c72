#include "backend/cpu/activations.h"

#include <cmath>

#include "backend/cpu/avx2/kernels.h"
#include "backend/cpu/kernel_util.h"

namespace mlxcel::cpu {
namespace {

constexpr std::int64_t kGrain = 4096;  // elements per task: below this threads cost more

void check_isa(CpuIsa isa, const char* op) {
  MLXCEL_CHECK(isa_supported(isa), ErrorCategory::kUnsupported,
               std::string(op) + ": AVX2 kernels requested on a CPU without AVX2/FMA/F16C");
}

}  // namespace

float silu_f32(float x) { return x / (1.0f + std::exp(-x)); }
float gelu_f32(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f)); }
float gelu_tanh_f32(float x) {
  const float u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(u));
}
float act_f32(ActKind kind, float x) {
  switch (kind) {
    case ActKind::kSilu: return silu_f32(x);
    case ActKind::kGelu: return gelu_f32(x);
    default: return gelu_tanh_f32(x);
  }
}

void activation_ref(ActKind kind, const void* x, void* y, DType dtype, std::int64_t n) {
  detail::dispatch_float("activation", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* xs = static_cast<const T*>(x);
    T* ys = static_cast<T*>(y);
    for (std::int64_t i = 0; i < n; ++i) ys[i] = from_f32<T>(act_f32(kind, to_f32(xs[i])));
  });
}

void gated_activation_ref(ActKind kind, const void* gate, const void* up, void* y, DType dtype,
                          std::int64_t n) {
  detail::dispatch_float("gated_activation", dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* g = static_cast<const T*>(gate);
    const T* u = static_cast<const T*>(up);
    T* ys = static_cast<T*>(y);
    for (std::int64_t i = 0; i < n; ++i)
      ys[i] = from_f32<T>(act_f32(kind, to_f32(g[i])) * to_f32(u[i]));
  });
}

void activation(ActKind kind, const void* x, void* y, DType dtype, std::int64_t n, CpuIsa isa,
                ThreadPool* pool) {
  check_isa(isa, "activation");
  if (!detail::is_activation_dtype(dtype)) detail::unsupported_dtype("activation", dtype);
  const std::size_t es = dtype_size(dtype);
  pool_or_default(pool).parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
    const void* xs = static_cast<const char*>(x) + b * es;
    void* ys = static_cast<char*>(y) + b * es;
    if (isa == CpuIsa::kAvx2) avx2::activation_rows(static_cast<int>(kind), xs, ys, dtype, e - b);
    else activation_ref(kind, xs, ys, dtype, e - b);
  });
}

void gated_activation(ActKind kind, const void* gate, const void* up, void* y, DType dtype,
                      std::int64_t n, CpuIsa isa, ThreadPool* pool) {
  check_isa(isa, "gated_activation");
  if (!detail::is_activation_dtype(dtype)) detail::unsupported_dtype("gated_activation", dtype);
  const std::size_t es = dtype_size(dtype);
  pool_or_default(pool).parallel_for(n, kGrain, [&](std::int64_t b, std::int64_t e) {
    const void* g = static_cast<const char*>(gate) + b * es;
    const void* u = static_cast<const char*>(up) + b * es;
    void* ys = static_cast<char*>(y) + b * es;
    if (isa == CpuIsa::kAvx2) avx2::gated_rows(static_cast<int>(kind), g, u, ys, dtype, e - b);
    else gated_activation_ref(kind, g, u, ys, dtype, e - b);
  });
}

}  // namespace mlxcel::cpu
