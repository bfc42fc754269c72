#pragma once
// The GPU backend as backend::create_backend reaches it. Defined by the GPU build
// (gpu_backend.cu); a CPU-only build links backend/no_gpu/, whose definition throws unsupported.
// No build flags here: callers never need to know which build they are in.
#include <memory>

#include "backend/backend.h"

namespace mlxcel::gpu {

// The GpuBackend on `device` for `kind` (kCuda or kRocm). Throws unsupported when this binary
// was not built for `kind` or has no GPU backend, and bad_input when the device does not exist.
std::unique_ptr<backend::Backend> create_gpu_backend(BackendKind kind, int device = 0);

}  // namespace mlxcel::gpu
