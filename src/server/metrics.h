#pragma once
// Prometheus metrics for /metrics (text exposition format 0.0.4). Counters, gauges and
// histograms with fixed buckets; every update is lock-free or a short lock, safe from the engine
// thread and HTTP workers at once.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace mlxcel::server {

class Counter {
 public:
  void add(double v = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  struct Snapshot {
    std::vector<double> bounds;
    std::vector<std::uint64_t> cumulative;  // per bound, then +Inf last
    double sum = 0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<std::uint64_t> counts_;  // bounds_.size() + 1 (the +Inf bucket)
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

struct ServerMetrics {
  Counter requests_total;           // requests accepted into the queue
  Counter requests_rejected_total;  // 4xx/429/503 before generation
  Counter requests_failed_total;    // errors during generation
  Counter requests_cancelled_total; // client disconnects
  Counter prompt_tokens_total;
  Counter generated_tokens_total;
  Counter prefix_cache_hit_tokens_total;
  Gauge queue_depth;
  Gauge active_slots;
  Gauge kv_blocks_used;
  Gauge kv_blocks_total;
  Histogram ttft_seconds{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram inter_token_seconds{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
  Histogram request_seconds{{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}};

  std::string render() const;  // the /metrics body
};

}  // namespace mlxcel::server
