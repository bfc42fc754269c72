#pragma once
// Vendor-neutral GPU runtime: device enumeration, streams, events, a caching allocator and
// checked copies. Compiled from runtime.cu for CUDA or HIP; src/backend/no_gpu/ provides the
// link-time stub for CPU-only builds, so callers never need #ifdefs.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace mlxcel::gpu {

// Which GPU backend this binary was built with; kCpu when none.
BackendKind compiled_backend();
// GPU targets compiled into this binary ("sm_90", "gfx1151", ...); empty for CPU-only builds.
std::vector<std::string> compiled_targets();

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string arch;  // "sm_90", "gfx1151"
  std::size_t total_bytes = 0;
  std::size_t free_bytes = 0;
  int compute_units = 0;
  int warp_size = 0;
  bool integrated = false;  // APU / UMA (gfx1151 is one)
  bool supported = false;   // this binary has code for the device's arch
  std::string unsupported_reason;
};

// Devices the runtime sees. Never throws for "no driver / no device": returns an empty list and
// fills *why_none (if given) with the runtime's answer.
std::vector<DeviceInfo> list_devices(std::string* why_none = nullptr);
std::string runtime_version();  // "CUDA runtime 13.0 / driver 13.0", "HIP 5.2"

// Selects a device for this thread; throws (unsupported) if the binary lacks code for its arch.
void use_device(int index);
// Makes `index` the calling thread's current device if it is not already (remembered per thread,
// so the runtime call happens once per thread and device, not on every operation).
void ensure_device(int index);

// Runs a deliberate fault on `device` ("oob": a kernel writes far out of bounds; "spin": a kernel
// that never ends; "oom": a 1 PiB allocation) and throws the Error it becomes (selftest).
void inject_fault(const std::string& kind, int device);

// Page-locked host memory (fast, truly asynchronous copies); out_of_memory names the size.
void* host_alloc(std::size_t bytes);
void host_free(void* p);

class Stream {
 public:
  explicit Stream(int device = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  void* handle() const { return handle_; }
  int device() const { return device_; }
  // Waits for all work; an asynchronous fault or a wait beyond the watchdog limit
  // (MLXCEL_GPU_WATCHDOG_SECS or MLXCEL_GPU_WATCHDOG_MS, default 120 s) becomes a device_fault Error naming `op`.
  void synchronize(const char* op = "stream synchronize") const;

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(const Stream& s);
  void wait(const char* op = "event wait") const;  // host waits, with the watchdog
  float elapsed_ms(const Event& start) const;      // both recorded with timing=true
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
  int device_ = 0;
};

// Work queued on a stream, recorded once and replayed with one launch (a CUDA/HIP graph): the
// replay runs the same kernels with the same arguments, so everything they address must still be
// where it was when recorded (DESIGN.md "Decode is captured").
class Graph {
 public:
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  // Queues the recorded work on `s` (the stream it was recorded from).
  void launch(const Stream& s) const;

 private:
  friend std::unique_ptr<Graph> end_capture(const Stream& s, bool discard);
  Graph() = default;
  void* graph_ = nullptr;
  void* exec_ = nullptr;
  int device_ = 0;
};

// From begin_capture to end_capture, work this thread queues on `s` is recorded, not run.
void begin_capture(const Stream& s);
// Ends the recording. Returns the replayable graph, or nullptr when `discard` is set or the
// runtime invalidated the recording (an operation that cannot be recorded ran). Either way none
// of the recorded work has run.
std::unique_ptr<Graph> end_capture(const Stream& s, bool discard = false);

struct AllocatorStats {
  std::size_t current_bytes = 0;  // held by live allocations
  std::size_t peak_bytes = 0;     // high-water mark of current_bytes
  std::size_t cached_bytes = 0;   // freed blocks kept for reuse
  std::size_t num_allocs = 0;     // calls that reached the runtime allocator
};

// Caching device allocator (one per device). Blocks are rounded to size classes and reused;
// on an allocation failure the cache is released and the allocation retried once before an
// out_of_memory Error is thrown.
class Allocator {
 public:
  static Allocator& for_device(int device);
  void* allocate(std::size_t bytes, const char* what = "buffer");
  void release(void* ptr);
  void empty_cache();
  AllocatorStats stats() const;
  virtual ~Allocator() = default;

 protected:
  Allocator() = default;
  virtual void* allocate_impl(std::size_t bytes, const char* what) = 0;
  virtual void release_impl(void* ptr) = 0;
  virtual void empty_cache_impl() = 0;
  virtual AllocatorStats stats_impl() const = 0;
};

// Device memory owned by RAII; returned to the caching allocator on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device = 0, const char* what = "buffer");
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* data() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

void copy_to_device(void* dst, const void* src, std::size_t bytes, const Stream& s);
void copy_to_host(void* dst, const void* src, std::size_t bytes, const Stream& s);
void copy_device_to_device(void* dst, const void* src, std::size_t bytes, const Stream& s);
void memset_device(void* dst, int value, std::size_t bytes, const Stream& s);

}  // namespace mlxcel::gpu
