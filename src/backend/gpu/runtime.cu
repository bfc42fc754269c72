// GPU runtime over the compat layer: the same source builds for CUDA and HIP.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "backend/gpu/compat.h"
#include "backend/gpu/runtime.h"
#include "core/log.h"

#ifndef MLXCEL_GPU_TARGETS
#error "MLXCEL_GPU_TARGETS must name the compiled GPU targets"
#endif

namespace mlxcel::gpu {
namespace {

std::vector<std::string> split_targets(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {  // the build passes targets comma-separated
    if (item.empty()) continue;
#if defined(MLXCEL_GPU_CUDA)
    // CMake CUDA architectures are "90", "90-real", "90-virtual".
    auto dash = item.find('-');
    std::string num = item.substr(0, dash);
    item = "sm_" + num;
#endif
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

#if defined(MLXCEL_GPU_CUDA)
int cc_of(const std::string& sm) { return std::atoi(sm.c_str() + 3); }  // "sm_90" -> 90
#endif

bool arch_supported(const std::string& arch, std::string* why) {
  auto targets = compiled_targets();
#if defined(MLXCEL_GPU_HIP)
  // HIP code objects must match the gfx target exactly.
  if (std::find(targets.begin(), targets.end(), arch) != targets.end()) return true;
#else
  int d = cc_of(arch);
  int max_target = 0;
  for (const auto& t : targets) {
    int c = cc_of(t);
    max_target = std::max(max_target, c);
    if (c / 10 == d / 10 && c % 10 <= d % 10) return true;  // same-major SASS runs forward
  }
  if (d >= max_target && max_target > 0) return true;  // PTX of the newest target JIT-compiles
#endif
  std::string list;
  for (const auto& t : targets) list += (list.empty() ? "" : ";") + t;
  *why = "this mlxcel was built for " + list + " but the device is " + arch + "; rebuild with " +
#if defined(MLXCEL_GPU_HIP)
         "-DMLXCEL_ROCM_ARCHITECTURES=\"" + list + ";" + arch + "\"";
#else
         "-DMLXCEL_CUDA_ARCHITECTURES=\"" + list + ";" + arch.substr(3) + "\"";
#endif
  return false;
}

// MLXCEL_GPU_WATCHDOG_SECS (or, finer, MLXCEL_GPU_WATCHDOG_MS); default 120 s.
long watchdog_ms() {
  static const long ms = [] {
    if (const char* e = std::getenv("MLXCEL_GPU_WATCHDOG_MS"); e && std::atol(e) > 0)
      return std::atol(e);
    if (const char* e = std::getenv("MLXCEL_GPU_WATCHDOG_SECS"); e && std::atof(e) > 0)
      return static_cast<long>(std::atof(e) * 1000.0);
    return 120000L;
  }();
  return ms;
}

// Polls an event until it completes, with a deadline, so a hung device becomes an error. The
// first 20 ms spin, yielding the core between polls (what the CUDA runtime's default spin wait
// does): the wait that ends a decode step lasts the whole step, 1-5 ms, and a sleep would end up
// to one sleep plus the scheduler's wake-up after the GPU finished, every token. Longer waits (a
// long prefill, a hung kernel for the watchdog) sleep in steps of at most 50 us.
void wait_event(gpuEvent_t ev, const char* op, int device) {
  const auto start = std::chrono::steady_clock::now();
  constexpr auto kSpin = std::chrono::milliseconds(20);
  auto sleep = std::chrono::microseconds(5);
  while (true) {
    gpuError_t st = gpuEventQuery(ev);
    if (st == gpuSuccess) return;
    if (st != gpuErrorNotReady) check(st, "gpuEventQuery", op, device);
    auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count();
    if (elapsed > watchdog_ms()) {
      throw_error(ErrorCategory::kDeviceFault,
                  std::string(MLXCEL_GPU_VENDOR ":") + std::to_string(device) + ": " + op +
                      " did not complete within " + std::to_string(watchdog_ms()) +
                      " ms (watchdog, MLXCEL_GPU_WATCHDOG_SECS); the device may be hung or a kernel "
                      "may loop forever: rerun with MLXCEL_GPU_SYNC_OPS=1 to find the op");
    }
    if (std::chrono::steady_clock::now() - start < kSpin) {
      std::this_thread::yield();  // other threads (the server's) still get the core
      continue;
    }
    std::this_thread::sleep_for(sleep);
    if (sleep < std::chrono::microseconds(50)) sleep *= 2;
  }
}

// Size classes: 512-byte granularity below 1 MiB, 2 MiB granularity above, so a decode loop
// that frees and reallocates the same shapes hits the cache.
std::size_t round_size(std::size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr std::size_t kSmall = 512, kLarge = 2u << 20, kSplit = 1u << 20;
  if (bytes < kSplit) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  ~CachingAllocator() override = default;  // process exit: the driver reclaims memory

 protected:
  void* allocate_impl(std::size_t bytes, const char* what) override {
    std::size_t sz = round_size(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(sz);
    void* p = nullptr;
    if (it != free_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= sz;
    } else {
      // The device is the calling thread's current one (GpuBackend selects it once per thread
      // through ensure_device); no device switch hides in here.
      gpuError_t err = gpuMalloc(&p, sz);
      if (err != gpuSuccess) {
        (void)gpuGetLastError();
        release_cache_locked();
        err = gpuMalloc(&p, sz);
      }
      if (err != gpuSuccess) {
        (void)gpuGetLastError();
        std::size_t free_b = 0, total_b = 0;
        (void)gpuMemGetInfo(&free_b, &total_b);
        throw_error(ErrorCategory::kOutOfMemory,
                    std::string(MLXCEL_GPU_VENDOR ":") + std::to_string(device_) +
                        ": out of device memory allocating " + std::to_string(bytes) +
                        " bytes for " + what + " (" + std::to_string(free_b >> 20) +
                        " MiB free of " + std::to_string(total_b >> 20) + " MiB, " +
                        std::to_string(stats_.current_bytes >> 20) +
                        " MiB held by mlxcel); use a smaller model, context or batch");
      }
      ++stats_.num_allocs;
    }
    live_[p] = sz;
    stats_.current_bytes += sz;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
    return p;
  }

  void release_impl(void* ptr) override {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      throw_error(ErrorCategory::kInternal, "gpu allocator: release of an unknown pointer");
    }
    std::size_t sz = it->second;
    live_.erase(it);
    stats_.current_bytes -= sz;
    stats_.cached_bytes += sz;
    free_[sz].push_back(ptr);
  }

  void empty_cache_impl() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_cache_locked();
  }

  AllocatorStats stats_impl() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  void release_cache_locked() {
    for (auto& [sz, ptrs] : free_) {
      for (void* p : ptrs) (void)gpuFree(p);
      stats_.cached_bytes -= sz * ptrs.size();
      ptrs.clear();
    }
  }

  int device_;
  mutable std::mutex mu_;
  std::unordered_map<void*, std::size_t> live_;
  std::map<std::size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

int current_device() {
  int d = 0;
  (void)gpuGetDevice(&d);
  return d;
}

}  // namespace

BackendKind compiled_backend() {
#if defined(MLXCEL_GPU_HIP)
  return BackendKind::kRocm;
#else
  return BackendKind::kCuda;
#endif
}

std::vector<std::string> compiled_targets() { return split_targets(MLXCEL_GPU_TARGETS); }

std::string runtime_version() {
  int rt = 0, drv = 0;
  (void)gpuRuntimeGetVersion(&rt);
  (void)gpuDriverGetVersion(&drv);
  (void)gpuGetLastError();
  auto fmt = [](int v) {
#if defined(MLXCEL_GPU_HIP)
    // HIP encodes major*10000000 + minor*100000 + patch.
    return std::to_string(v / 10000000) + "." + std::to_string((v / 100000) % 100);
#else
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
#endif
  };
  return runtime_name() + " runtime " + fmt(rt) + ", driver " + (drv ? fmt(drv) : "none");
}

std::vector<DeviceInfo> list_devices(std::string* why_none) {
  std::vector<DeviceInfo> out;
  int n = 0;
  gpuError_t err = gpuGetDeviceCount(&n);
  if (err != gpuSuccess) {
    if (why_none) *why_none = std::string(runtime_name()) + " reports: " + gpuGetErrorString(err);
    (void)gpuGetLastError();
    return out;
  }
  if (n == 0 && why_none) *why_none = runtime_name() + " runtime found no devices";
  for (int i = 0; i < n; ++i) {
    gpuDeviceProp_t p{};
    if (gpuGetDeviceProperties(&p, i) != gpuSuccess) {
      (void)gpuGetLastError();
      continue;
    }
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.arch = device_arch_name(p);
    d.total_bytes = p.totalGlobalMem;
    d.compute_units = p.multiProcessorCount;
    d.warp_size = p.warpSize;
    d.integrated = p.integrated != 0;
    if (gpuSetDevice(i) == gpuSuccess) {
      std::size_t f = 0, t = 0;
      if (gpuMemGetInfo(&f, &t) == gpuSuccess) d.free_bytes = f;
    }
    (void)gpuGetLastError();
    d.supported = arch_supported(d.arch, &d.unsupported_reason);
    out.push_back(d);
  }
  return out;
}

void use_device(int index) {
  std::string why;
  auto devs = list_devices(&why);
  if (index < 0 || index >= static_cast<int>(devs.size())) {
    throw_error(ErrorCategory::kBadInput, "GPU device " + std::to_string(index) +
                                              " does not exist (" + std::to_string(devs.size()) +
                                              " visible" + (why.empty() ? "" : "; " + why) + ")");
  }
  if (!devs[index].supported)
    throw_error(ErrorCategory::kUnsupported, devs[index].unsupported_reason);
  GPU_CHECK(gpuSetDevice(index), "use_device", index);
}

void ensure_device(int index) {
  thread_local int current = -1;
  if (current == index) return;
  GPU_CHECK(gpuSetDevice(index), "select device", index);
  current = index;
}

void* host_alloc(std::size_t bytes) {
  void* p = nullptr;
  if (gpuHostAlloc(&p, std::max<std::size_t>(bytes, 1)) != gpuSuccess) {
    (void)gpuGetLastError();
    throw_error(ErrorCategory::kOutOfMemory, "cannot allocate " + std::to_string(bytes) +
                                                 " bytes of page-locked host memory");
  }
  return p;
}

void host_free(void* p) {
  if (p) (void)gpuFreeHost(p);
}

Stream::Stream(int device) : device_(device) {
  GPU_CHECK(gpuSetDevice(device), "stream create", device);
  gpuStream_t s = nullptr;
  GPU_CHECK(gpuStreamCreateWithFlags(&s, gpuStreamNonBlocking), "stream create", device);
  handle_ = s;
}

Stream::~Stream() {
  if (handle_) (void)gpuStreamDestroy(static_cast<gpuStream_t>(handle_));
}

void Stream::synchronize(const char* op) const {
  gpuEvent_t ev = nullptr;
  GPU_CHECK(gpuEventCreateWithFlags(&ev, gpuEventDisableTiming), op, device_);
  struct Guard {
    gpuEvent_t e;
    ~Guard() { (void)gpuEventDestroy(e); }
  } guard{ev};
  GPU_CHECK(gpuEventRecord(ev, static_cast<gpuStream_t>(handle_)), op, device_);
  wait_event(ev, op, device_);
  GPU_CHECK(gpuGetLastError(), op, device_);
}

void begin_capture(const Stream& s) {
  GPU_CHECK(gpuStreamBeginCapture(static_cast<gpuStream_t>(s.handle()),
                                  gpuStreamCaptureModeThreadLocal),
            "graph capture", s.device());
}

std::unique_ptr<Graph> end_capture(const Stream& s, bool discard) {
  gpuGraph_t g = nullptr;
  const gpuError_t err = gpuStreamEndCapture(static_cast<gpuStream_t>(s.handle()), &g);
  // An invalidated recording leaves its error behind; clear it so the next launch check does not
  // report it against an innocent op.
  (void)gpuGetLastError();
  if (err != gpuSuccess || g == nullptr || discard) {
    if (g) (void)gpuGraphDestroy(g);
    return nullptr;
  }
  std::unique_ptr<Graph> out(new Graph());
  out->graph_ = g;
  out->device_ = s.device();
  gpuGraphExec_t exec = nullptr;
  if (gpuGraphInstantiate(&exec, g) != gpuSuccess) {
    (void)gpuGetLastError();
    return nullptr;  // out's destructor frees the graph
  }
  out->exec_ = exec;
  return out;
}

Graph::~Graph() {
  if (exec_) (void)gpuGraphExecDestroy(static_cast<gpuGraphExec_t>(exec_));
  if (graph_) (void)gpuGraphDestroy(static_cast<gpuGraph_t>(graph_));
}

void Graph::launch(const Stream& s) const {
  GPU_CHECK(gpuGraphLaunch(static_cast<gpuGraphExec_t>(exec_), static_cast<gpuStream_t>(s.handle())),
            "graph launch", device_);
}

Event::Event(bool timing) : device_(current_device()) {
  gpuEvent_t e = nullptr;
  GPU_CHECK(gpuEventCreateWithFlags(&e, timing ? gpuEventDefault : gpuEventDisableTiming),
            "event create", device_);
  handle_ = e;
}

Event::~Event() {
  if (handle_) (void)gpuEventDestroy(static_cast<gpuEvent_t>(handle_));
}

void Event::record(const Stream& s) {
  GPU_CHECK(gpuEventRecord(static_cast<gpuEvent_t>(handle_), static_cast<gpuStream_t>(s.handle())),
            "event record", s.device());
}

void Event::wait(const char* op) const {
  wait_event(static_cast<gpuEvent_t>(handle_), op, device_);
}

float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  GPU_CHECK(gpuEventElapsedTime(&ms, static_cast<gpuEvent_t>(start.handle_),
                                static_cast<gpuEvent_t>(handle_)),
            "event elapsed", device_);
  return ms;
}

Allocator& Allocator::for_device(int device) {
  // Never destroyed: buffers owned by other statics (a backend held for a whole test binary)
  // are released during static destruction, after a destructible registry would be gone.
  static auto* mu = new std::mutex;
  static auto* registry = new std::map<int, std::unique_ptr<CachingAllocator>>;
  std::lock_guard<std::mutex> lock(*mu);
  auto& slot = (*registry)[device];
  if (!slot) slot = std::make_unique<CachingAllocator>(device);
  return *slot;
}

void* Allocator::allocate(std::size_t bytes, const char* what) {
  return allocate_impl(bytes, what);
}
void Allocator::release(void* ptr) { release_impl(ptr); }
void Allocator::empty_cache() { empty_cache_impl(); }
AllocatorStats Allocator::stats() const { return stats_impl(); }

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device, const char* what)
    : ptr_(Allocator::for_device(device).allocate(bytes, what)), bytes_(bytes), device_(device) {}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) Allocator::for_device(device_).release(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(o.ptr_), bytes_(o.bytes_), device_(o.device_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) Allocator::for_device(device_).release(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, const Stream& s) {
  GPU_CHECK(
      gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, static_cast<gpuStream_t>(s.handle())),
      "copy_to_device", s.device());
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, const Stream& s) {
  GPU_CHECK(
      gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToHost, static_cast<gpuStream_t>(s.handle())),
      "copy_to_host", s.device());
  s.synchronize("copy_to_host");
}

void copy_device_to_device(void* dst, const void* src, std::size_t bytes, const Stream& s) {
  GPU_CHECK(gpuMemcpyAsync(dst, src, bytes, gpuMemcpyDeviceToDevice,
                           static_cast<gpuStream_t>(s.handle())),
            "copy_device_to_device", s.device());
}

void memset_device(void* dst, int value, std::size_t bytes, const Stream& s) {
  GPU_CHECK(gpuMemsetAsync(dst, value, bytes, static_cast<gpuStream_t>(s.handle())),
            "memset_device", s.device());
}

}  // namespace mlxcel::gpu
