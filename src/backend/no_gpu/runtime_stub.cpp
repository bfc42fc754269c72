// Link-time stand-in for the GPU runtime in CPU-only builds (MLXCEL_GPU=none): every query says
// "no GPU", every GPU operation is an `unsupported` error that says how to get a GPU build.
#include <string>

#include "backend/gpu/factory.h"
#include "backend/gpu/rms_norm.h"
#include "backend/gpu/runtime.h"
#include "core/error.h"

namespace mlxcel::gpu {
namespace {
[[noreturn]] void no_gpu(const char* what) {
  throw_error(ErrorCategory::kUnsupported,
              std::string(what) +
                  ": this mlxcel was built without a GPU backend (MLXCEL_GPU=none); rebuild with "
                  "the cuda or rocm preset to use a GPU");
}
}  // namespace

BackendKind compiled_backend() { return BackendKind::kCpu; }
std::vector<std::string> compiled_targets() { return {}; }
std::vector<DeviceInfo> list_devices(std::string* why_none) {
  if (why_none) *why_none = "this build has no GPU backend (MLXCEL_GPU=none)";
  return {};
}
std::string runtime_version() { return "none"; }
void use_device(int) { no_gpu("use_device"); }
void ensure_device(int) { no_gpu("ensure_device"); }
void* host_alloc(std::size_t) { no_gpu("host_alloc"); }
void host_free(void*) {}
void inject_fault(const std::string&, int) { no_gpu("inject_fault"); }

Stream::Stream(int) { no_gpu("Stream"); }
Stream::~Stream() = default;
void Stream::synchronize(const char*) const { no_gpu("Stream::synchronize"); }
Event::Event(bool) { no_gpu("Event"); }
Event::~Event() = default;
void Event::record(const Stream&) { no_gpu("Event::record"); }
void Event::wait(const char*) const { no_gpu("Event::wait"); }
float Event::elapsed_ms(const Event&) const { no_gpu("Event::elapsed_ms"); }

void begin_capture(const Stream&) { no_gpu("begin_capture"); }
std::unique_ptr<Graph> end_capture(const Stream&, bool) { no_gpu("end_capture"); }
Graph::~Graph() = default;
void Graph::launch(const Stream&) const { no_gpu("Graph::launch"); }

Allocator& Allocator::for_device(int) { no_gpu("Allocator"); }
void* Allocator::allocate(std::size_t, const char*) { no_gpu("Allocator::allocate"); }
void Allocator::release(void*) { no_gpu("Allocator::release"); }
void Allocator::empty_cache() {}
AllocatorStats Allocator::stats() const { return {}; }
DeviceBuffer::DeviceBuffer(std::size_t, int, const char*) { no_gpu("DeviceBuffer"); }
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer::DeviceBuffer(DeviceBuffer&&) noexcept = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&&) noexcept = default;

void copy_to_device(void*, const void*, std::size_t, const Stream&) { no_gpu("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t, const Stream&) { no_gpu("copy_to_host"); }
void copy_device_to_device(void*, const void*, std::size_t, const Stream&) {
  no_gpu("copy_device_to_device");
}
void memset_device(void*, int, std::size_t, const Stream&) { no_gpu("memset_device"); }

std::unique_ptr<backend::Backend> create_gpu_backend(BackendKind kind, int) {
  throw_error(ErrorCategory::kUnsupported,
              "the " + std::string(backend_name(kind)) +
                  " backend is not in this mlxcel: it was built without a GPU backend "
                  "(MLXCEL_GPU=none); use --device cpu, or rebuild with the cuda or rocm preset");
}

void rms_norm(const void*, const void*, void*, std::int64_t, std::int64_t, std::int64_t, float,
              DType, const Stream&) {
  no_gpu("rms_norm");
}
void add_rms_norm(const void*, const void*, const void*, void*, void*, std::int64_t, std::int64_t,
                  float, DType, const Stream&) {
  no_gpu("add_rms_norm");
}

}  // namespace mlxcel::gpu
