#pragma once
// A persistent pool of worker threads for the CPU kernels.
//   parallel_for(n, grain, fn) splits [0, n) into chunks of at least `grain` items, runs
//   fn(begin, end) on the workers and the calling thread, and returns when all chunks are done.
// Calls made from inside a pool task run inline (no nested fan-out, no deadlock). One
// parallel_for runs at a time per pool; concurrent callers are serialized.
//
// Process-wide state: default_thread_pool() is the one global, created on first use with
// MLXCEL_THREADS threads (or std::thread::hardware_concurrency()). Kernels take a pool pointer
// and use it when the caller passes nullptr.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mlxcel::cpu {

class ThreadPool {
 public:
  using RangeFn = std::function<void(std::int64_t begin, std::int64_t end)>;

  // n_threads counts the calling thread: a pool of 1 runs everything inline.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void parallel_for(std::int64_t n, std::int64_t grain, const RangeFn& fn);

 private:
  void worker_loop();
  void run_chunks();

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mutex_;  // serializes parallel_for callers
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::uint64_t generation_ = 0;  // bumped per job; workers wait for a new one
  bool stop_ = false;
  // Current job (valid while a parallel_for is in flight).
  const RangeFn* fn_ = nullptr;
  std::int64_t n_ = 0;
  std::int64_t chunk_ = 1;
  std::atomic<std::int64_t> next_{0};
  int active_workers_ = 0;
};

// Threads from MLXCEL_THREADS (a positive integer) or hardware_concurrency(); throws kBadInput for
// a malformed value.
int default_thread_count();

// The process-wide pool (created on first call, lives until exit).
ThreadPool& default_thread_pool();

// Helper for kernels: `pool` or the default one.
inline ThreadPool& pool_or_default(ThreadPool* pool) {
  return pool ? *pool : default_thread_pool();
}

}  // namespace mlxcel::cpu
