#include "backend/gpu/op_timer.h"

#include <algorithm>
#include <cstdio>

namespace mlxcel::gpu {

gpuEvent_t OpTimer::event() {
  if (!free_.empty()) {
    gpuEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  gpuEvent_t e = nullptr;
  (void)gpuEventCreateWithFlags(&e, gpuEventDefault);
  return e;
}

void OpTimer::begin(gpuStream_t s) {
  open_ = event();
  (void)gpuEventRecord(open_, s);
  if (!first_) {
    first_ = event();
    (void)gpuEventRecord(first_, s);
  }
}

void OpTimer::end(gpuStream_t s, std::string label) {
  gpuEvent_t b = event();
  (void)gpuEventRecord(b, s);
  pending_.push_back({open_, b, std::move(label)});
  if (pending_.size() >= 4096) harvest();
}

void OpTimer::harvest() {
  if (pending_.empty()) return;
  (void)gpuEventSynchronize(pending_.back().b);
  for (Pending& p : pending_) {
    float ms = 0.0f;
    if (gpuEventElapsedTime(&ms, p.a, p.b) == gpuSuccess) {
      Stat& st = stats_[p.label];
      ++st.n;
      st.ms += ms;
    }
    free_.push_back(p.a);
    free_.push_back(p.b);
  }
  float span = 0.0f;
  if (first_ && gpuEventElapsedTime(&span, first_, pending_.back().b) == gpuSuccess)
    span_ms_ = span;
  pending_.clear();
}

void OpTimer::report() {
  if (reported_) return;
  reported_ = true;
  harvest();
  double busy = 0.0;
  for (const auto& [k, v] : stats_) busy += v.ms;
  std::vector<std::pair<std::string, Stat>> rows(stats_.begin(), stats_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  std::fprintf(stderr, "\n# device time per op (MLXCEL_GPU_PROFILE), device %d\n", device_);
  std::fprintf(stderr, "%-52s %9s %11s %10s %7s\n", "op", "launches", "total ms", "mean us",
               "share");
  for (const auto& [k, v] : rows)
    std::fprintf(stderr, "%-52s %9lld %11.2f %10.2f %6.1f%%\n", k.c_str(), v.n, v.ms,
                 v.n ? 1000.0 * v.ms / static_cast<double>(v.n) : 0.0,
                 busy > 0 ? 100.0 * v.ms / busy : 0.0);
  std::fprintf(stderr,
               "device busy %.2f ms of a %.2f ms span from the first op to the last (%.1f%%)\n",
               busy, static_cast<double>(span_ms_),
               span_ms_ > 0 ? 100.0 * busy / static_cast<double>(span_ms_) : 0.0);
}

OpTimer::~OpTimer() {
  report();
  for (gpuEvent_t e : free_) (void)gpuEventDestroy(e);
  if (first_) (void)gpuEventDestroy(first_);
}

}  // namespace mlxcel::gpu
