// GPU runtime: enumeration never throws, the caching allocator reuses blocks and reports
// current/peak bytes, an impossible allocation is an out_of_memory Error (not a crash), and a
// CPU-only build answers every GPU call with a clear `unsupported` error.
#include <gtest/gtest.h>

#include <string>

#include "backend/gpu/runtime.h"
#include "core/error.h"
#include "gpu_test_util.h"

using namespace mlxcel;

TEST(GpuRuntime, ListDevicesNeverThrows) {
  std::string why;
  auto devs = gpu::list_devices(&why);
  if (devs.empty()) {
    EXPECT_FALSE(why.empty());
  }
  for (const auto& d : devs) {
    EXPECT_FALSE(d.arch.empty());
    EXPECT_GT(d.total_bytes, 0u);
    EXPECT_TRUE(d.warp_size == 32 || d.warp_size == 64);
  }
}

TEST(GpuRuntime, CpuBuildRejectsGpuCallsClearly) {
  if (gpu::compiled_backend() != BackendKind::kCpu) GTEST_SKIP() << "GPU build";
  EXPECT_TRUE(gpu::compiled_targets().empty());
  try {
    gpu::Stream s(0);
    FAIL() << "Stream on a CPU build must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("MLXCEL_GPU=none"), std::string::npos);
  }
}

TEST(GpuRuntime, CachingAllocatorReusesAndTracksPeak) {
  MLXCEL_REQUIRE_GPU_OR_SKIP();
  auto& alloc = gpu::Allocator::for_device(0);
  alloc.empty_cache();
  auto base = alloc.stats();
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(3u << 20);
  auto s1 = alloc.stats();
  EXPECT_GE(s1.current_bytes, base.current_bytes + 1000 + (3u << 20));
  EXPECT_GE(s1.peak_bytes, s1.current_bytes);
  alloc.release(a);
  void* c = alloc.allocate(900);  // same size class: must reuse a's block
  EXPECT_EQ(c, a);
  alloc.release(b);
  alloc.release(c);
  auto s2 = alloc.stats();
  EXPECT_EQ(s2.current_bytes, base.current_bytes);
  EXPECT_GE(s2.cached_bytes, 1000u);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().cached_bytes, 0u);
}

TEST(GpuRuntime, ImpossibleAllocationIsOutOfMemory) {
  MLXCEL_REQUIRE_GPU_OR_SKIP();
  try {
    gpu::DeviceBuffer huge(std::size_t{1} << 52, 0, "test tensor");
    FAIL() << "a 4 PiB allocation cannot succeed";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kOutOfMemory);
    EXPECT_NE(std::string(e.what()).find("test tensor"), std::string::npos);
  }
  // The device still works afterwards.
  gpu::Stream s(0);
  gpu::DeviceBuffer ok(4096);
  gpu::memset_device(ok.data(), 0, 4096, s);
  s.synchronize("after oom");
}

TEST(GpuRuntime, EventsTimeWork) {
  MLXCEL_REQUIRE_GPU_OR_SKIP();
  gpu::Stream s(0);
  gpu::Event start(true), stop(true);
  gpu::DeviceBuffer buf(64u << 20);
  start.record(s);
  gpu::memset_device(buf.data(), 1, buf.bytes(), s);
  stop.record(s);
  stop.wait();
  EXPECT_GE(stop.elapsed_ms(start), 0.0f);
}
