#pragma once
// Shared helpers for tests that run on a GPU when one is present. Without a device the test is
// skipped, unless MLXCEL_REQUIRE_GPU=1 (set by scripts/gpu-test.sh), where a missing GPU fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/gpu/runtime.h"

namespace mlxcel::test {

inline bool require_gpu() {
  const char* e = std::getenv("MLXCEL_REQUIRE_GPU");
  return e != nullptr && std::string(e) == "1";
}

// Returns true if a usable GPU is present; otherwise skips (or fails when required).
inline bool gpu_available(std::string* why = nullptr) {
  std::string reason;
  if (gpu::compiled_backend() == BackendKind::kCpu) {
    reason = "built without a GPU backend";
  } else {
    auto devs = gpu::list_devices(&reason);
    if (!devs.empty() && devs[0].supported) return true;
    if (!devs.empty()) reason = devs[0].unsupported_reason;
  }
  if (why) *why = reason;
  return false;
}

}  // namespace mlxcel::test

#define MLXCEL_REQUIRE_GPU_OR_SKIP()                                    \
  do {                                                                  \
    std::string why_;                                                   \
    if (!::mlxcel::test::gpu_available(&why_)) {                        \
      if (::mlxcel::test::require_gpu()) FAIL() << "GPU required: " << why_; \
      GTEST_SKIP() << "no GPU: " << why_;                               \
    }                                                                   \
  } while (0)
