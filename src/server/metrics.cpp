#include "server/metrics.h"

#include <algorithm>
#include <sstream>

namespace mlxcel::server {

void Counter::add(double v) {
  double cur = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

void Gauge::add(double v) {
  double cur = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  std::sort(bounds_.begin(), bounds_.end());
}

void Histogram::observe(double v) {
  std::size_t i = static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                           bounds_.begin());
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += v;
  ++count_;
}

Histogram::Snapshot Histogram::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  Snapshot s;
  s.bounds = bounds_;
  std::uint64_t acc = 0;
  for (auto c : counts_) {
    acc += c;
    s.cumulative.push_back(acc);
  }
  s.sum = sum_;
  s.count = count_;
  return s;
}

namespace {
void scalar(std::ostringstream& os, const char* name, const char* type, const char* help, double v) {
  os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
     << name << ' ' << v << '\n';
}
void histogram(std::ostringstream& os, const char* name, const char* help, const Histogram& h) {
  auto s = h.snapshot();
  os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
  for (std::size_t i = 0; i < s.bounds.size(); ++i)
    os << name << "_bucket{le=\"" << s.bounds[i] << "\"} " << s.cumulative[i] << '\n';
  os << name << "_bucket{le=\"+Inf\"} " << s.cumulative.back() << '\n'
     << name << "_sum " << s.sum << '\n'
     << name << "_count " << s.count << '\n';
}
}  // namespace

std::string ServerMetrics::render() const {
  std::ostringstream os;
  scalar(os, "mlxcel_requests_total", "counter", "Requests accepted.", requests_total.value());
  scalar(os, "mlxcel_requests_rejected_total", "counter", "Requests refused before generation.",
         requests_rejected_total.value());
  scalar(os, "mlxcel_requests_failed_total", "counter", "Requests that failed during generation.",
         requests_failed_total.value());
  scalar(os, "mlxcel_requests_cancelled_total", "counter", "Requests cancelled by the client.",
         requests_cancelled_total.value());
  scalar(os, "mlxcel_prompt_tokens_total", "counter", "Prompt tokens processed.",
         prompt_tokens_total.value());
  scalar(os, "mlxcel_generated_tokens_total", "counter", "Tokens generated.",
         generated_tokens_total.value());
  scalar(os, "mlxcel_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens served from the prefix cache.", prefix_cache_hit_tokens_total.value());
  scalar(os, "mlxcel_queue_depth", "gauge", "Requests waiting for a slot.", queue_depth.value());
  scalar(os, "mlxcel_active_slots", "gauge", "Requests being generated.", active_slots.value());
  scalar(os, "mlxcel_kv_blocks_used", "gauge", "KV cache blocks in use.", kv_blocks_used.value());
  scalar(os, "mlxcel_kv_blocks_total", "gauge", "KV cache blocks.", kv_blocks_total.value());
  histogram(os, "mlxcel_time_to_first_token_seconds", "Time from request to first token.",
            ttft_seconds);
  histogram(os, "mlxcel_inter_token_latency_seconds", "Time between generated tokens.",
            inter_token_seconds);
  histogram(os, "mlxcel_request_duration_seconds", "Total request time.", request_seconds);
  return os.str();
}

}  // namespace mlxcel::server
