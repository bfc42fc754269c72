#include "backend/cpu/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace mlxcel::cpu {
namespace {
// Marks threads that are running pool work, so nested parallel_for calls run inline.
thread_local bool t_in_pool_task = false;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  workers_.reserve(static_cast<std::size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    std::int64_t begin = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (begin >= n_) break;
    (*fn_)(begin, std::min(n_, begin + chunk_));
  }
}

void ThreadPool::worker_loop() {
  t_in_pool_task = true;
  std::uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_workers_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(std::int64_t n, std::int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain || t_in_pool_task) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mutex_);
  // Several chunks per thread balance uneven work without making chunks smaller than grain.
  std::int64_t chunks_wanted = static_cast<std::int64_t>(n_threads_) * 4;
  std::int64_t chunk = std::max(grain, (n + chunks_wanted - 1) / chunks_wanted);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = &fn;
    n_ = n;
    chunk_ = chunk;
    next_.store(0, std::memory_order_relaxed);
    active_workers_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  wake_.notify_all();
  t_in_pool_task = true;
  run_chunks();
  t_in_pool_task = false;
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return active_workers_ == 0; });
  fn_ = nullptr;
}

int default_thread_count() {
  if (const char* env = std::getenv("MLXCEL_THREADS"); env != nullptr && env[0] != '\0') {
    char* end = nullptr;
    long v = std::strtol(env, &end, 10);
    MLXCEL_CHECK(end != env && *end == '\0' && v > 0 && v <= 1024, ErrorCategory::kBadInput,
                 "MLXCEL_THREADS='" + std::string(env) + "' must be a positive integer (<= 1024)");
    return static_cast<int>(v);
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc == 0 ? 1 : static_cast<int>(hc);
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool(default_thread_count());
  return pool;
}

}  // namespace mlxcel::cpu
