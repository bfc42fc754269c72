// Deliberate faults for `mlxcel selftest --inject-fault` (scripts/gpu_faults.sh): proves on real
// hardware that a kernel fault, a hung kernel and an impossible allocation each become a clean
// Error naming the device and the operation, in bounded time, instead of a crash or a hang.
#include <string>

#include "backend/gpu/common.cuh"
#include "backend/gpu/runtime.h"

namespace mlxcel::gpu {
namespace {

__global__ void out_of_bounds_kernel(float* p) {
  // Far outside any allocation: the device reports an illegal address.
  p[(static_cast<std::size_t>(1) << 40) + threadIdx.x] = 1.0f;
}

__global__ void spin_kernel(const volatile int* flag) {
  while (*flag == 0) {
  }
}

}  // namespace

void inject_fault(const std::string& kind, int device) {
  ensure_device(device);
  Stream s(device);
  auto st = static_cast<gpuStream_t>(s.handle());
  if (kind == "oob") {
    DeviceBuffer buf(256, device, "fault injection");
    out_of_bounds_kernel<<<1, 32, 0, st>>>(static_cast<float*>(buf.data()));
    check_launch("fault injection (out-of-bounds kernel)", device);
    s.synchronize("fault injection (out-of-bounds kernel)");
  } else if (kind == "spin") {
    DeviceBuffer flag(sizeof(int), device, "fault injection");
    memset_device(flag.data(), 0, sizeof(int), s);
    spin_kernel<<<1, 1, 0, st>>>(static_cast<const int*>(flag.data()));
    check_launch("fault injection (spinning kernel)", device);
    s.synchronize("fault injection (spinning kernel)");
  } else if (kind == "oom") {
    DeviceBuffer huge(static_cast<std::size_t>(1) << 50, device, "fault injection (1 PiB)");
  } else {
    throw_error(ErrorCategory::kBadInput, "--inject-fault: unknown fault \"" + kind + "\" (oob, spin, oom)");
  }
  throw_error(ErrorCategory::kInternal, "fault injection (" + kind + "): no error was reported");
}

}  // namespace mlxcel::gpu
