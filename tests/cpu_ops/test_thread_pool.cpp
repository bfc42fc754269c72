// Thread pool and ISA selection: every index runs exactly once, nested calls run inline, env
// parsing rejects bad values.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <cstdlib>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/thread_pool.h"
#include "core/error.h"

using namespace mlxcel;
using namespace mlxcel::cpu;

TEST(ThreadPool, EveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (std::int64_t n : {0, 1, 7, 64, 1000, 100003}) {
      for (std::int64_t grain : {1, 3, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
        pool.parallel_for(n, grain, [&](std::int64_t b, std::int64_t e) {
          ASSERT_LE(0, b);
          ASSERT_LE(b, e);
          ASSERT_LE(e, n);
          for (std::int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
        });
        for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << n << " " << grain << " " << i;
      }
    }
  }
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(4);
  std::atomic<std::int64_t> total{0};
  pool.parallel_for(16, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      pool.parallel_for(10, 1, [&](std::int64_t b2, std::int64_t e2) { total += e2 - b2; });
    }
  });
  EXPECT_EQ(total.load(), 160);
}

TEST(ThreadPool, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::atomic<int> distinct{0};
  std::mutex m;
  std::vector<std::thread::id> ids;
  pool.parallel_for(64, 1, [&](std::int64_t, std::int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    std::lock_guard<std::mutex> lock(m);
    auto id = std::this_thread::get_id();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) {
      ids.push_back(id);
      ++distinct;
    }
  });
  EXPECT_EQ(distinct.load(), 2);
}

TEST(ThreadPool, ThreadCountFromEnv) {
  const char* old = std::getenv("MLXCEL_THREADS");
  std::string saved = old ? old : "";
  setenv("MLXCEL_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), 3);
  for (const char* bad : {"0", "-2", "abc", "4x"}) {
    setenv("MLXCEL_THREADS", bad, 1);
    EXPECT_THROW(default_thread_count(), Error) << bad;
  }
  if (old) setenv("MLXCEL_THREADS", saved.c_str(), 1);
  else unsetenv("MLXCEL_THREADS");
  EXPECT_GE(default_thread_count(), 1);
}

TEST(CpuFeatures, ResolveIsa) {
  CpuFeatures none;
  CpuFeatures full;
  full.avx2 = full.fma = full.f16c = true;
  EXPECT_EQ(resolve_isa(nullptr, none), CpuIsa::kScalar);
  EXPECT_EQ(resolve_isa("", full), CpuIsa::kAvx2);
  EXPECT_EQ(resolve_isa("scalar", full), CpuIsa::kScalar);
  EXPECT_EQ(resolve_isa("avx2", full), CpuIsa::kAvx2);
  try {
    resolve_isa("avx2", none);
    FAIL() << "forcing avx2 on a CPU without it must throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
  }
  try {
    resolve_isa("sse9", full);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kBadInput);
  }
  CpuFeatures partial = full;
  partial.f16c = false;
  EXPECT_EQ(resolve_isa(nullptr, partial), CpuIsa::kScalar);
}

TEST(CpuFeatures, ActiveIsaIsSupported) {
  EXPECT_TRUE(isa_supported(active_isa()));
  EXPECT_TRUE(isa_supported(CpuIsa::kScalar));
  // On x86-64 Linux, /proc/cpuinfo and __builtin_cpu_supports must agree.
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) GTEST_SKIP() << "no /proc/cpuinfo";
  std::string text;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, f)) text.append(buf, n);
  std::fclose(f);
  auto has = [&](const char* flag) { return text.find(std::string(" ") + flag + " ") != std::string::npos ||
                                            text.find(std::string(" ") + flag + "\n") != std::string::npos; };
  EXPECT_EQ(cpu_features().avx2, has("avx2"));
  EXPECT_EQ(cpu_features().fma, has("fma"));
  EXPECT_EQ(cpu_features().f16c, has("f16c"));
}

TEST(CpuFeatures, EnvOverrideHonoured) {
  const char* env = std::getenv("MLXCEL_CPU_ISA");
  if (env == nullptr || env[0] == '\0') {
    EXPECT_EQ(active_isa(), cpu_features().avx2_path() ? CpuIsa::kAvx2 : CpuIsa::kScalar);
  } else {
    EXPECT_EQ(isa_name(active_isa()), std::string(env));
  }
  if (const char* t = std::getenv("MLXCEL_THREADS"); t != nullptr) {
    EXPECT_EQ(default_thread_pool().size(), std::atoi(t));
  }
}
