#pragma once
// What a device check needs around a Backend, shared by `mlxcel selftest` (selftest.cpp) and the
// op-conformance tests (tests/backend_ops): buffers that live as long as the check, activations
// written and read back in the backend's storage dtype, normal random values already rounded to
// the activation dtype, and the normalized error with bounds in rounding steps.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/dtype.h"

namespace mlxcel::selftest {

// Keeps a check's device buffers alive until it is destroyed.
struct DeviceMem {
  std::vector<std::unique_ptr<backend::DeviceBuffer>> bufs;

  // A workspace buffer holding a copy of `bytes` bytes from the host (at least 4 bytes).
  void* raw(backend::Backend& be, const void* src, std::size_t bytes);
  template <typename T>
  T* vec(backend::Backend& be, const std::vector<T>& v) {
    return static_cast<T*>(raw(be, v.data(), v.size() * sizeof(T)));
  }
  // An activation [rows, cols] with row stride cols + pad, in the backend's storage dtype.
  backend::Act act(backend::Backend& be, DType act_dtype, const std::vector<float>& vals,
                   std::int64_t rows, std::int64_t cols, std::int64_t pad = 0);
};

// The activation's values as fp32 (synchronizes the backend first).
std::vector<float> read_act(backend::Backend& be, const backend::Act& a);

// n elements of T from device memory (synchronizes the backend first).
template <typename T>
std::vector<T> read_raw(backend::Backend& be, const void* p, std::size_t n) {
  be.synchronize();
  std::vector<T> out(n);
  if (n) be.copy(out.data(), p, n * sizeof(T), backend::CopyKind::kDeviceToHost);
  return out;
}

// n normal values with standard deviation sd, each rounded to dtype t.
std::vector<float> randn(std::mt19937& rng, std::size_t n, float sd, DType t);

// max |got - want| / max |want| (infinite when got has a non-finite value).
double normalized_error(const std::vector<float>& got, const std::vector<float>& want);

// n rounding steps of the activation dtype (bf16 2^-8, f16 2^-11, f32 2e-6), as an error bound.
double rounding_steps(DType act, double n);

}  // namespace mlxcel::selftest
