#pragma once
// Device time per op (MLXCEL_GPU_PROFILE=1): an event pair around every op's launches on the
// compute stream, harvested in batches, and a table on stderr when the backend goes away: per op
// (linear split by its shape), launches, total and mean device time, share of the device-busy
// time, and the busy time against the wall span from the first op to the last. Where the busy
// share of the span is low, the host (launch overhead, scheduling, synchronization) decides.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/gpu/compat.h"

namespace mlxcel::gpu {

class OpTimer {
 public:
  explicit OpTimer(int device) : device_(device) {}
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Around one op's launches on `s`.
  void begin(gpuStream_t s);
  void end(gpuStream_t s, std::string label);
  void report();

 private:
  gpuEvent_t event();
  void harvest();

  struct Pending {
    gpuEvent_t a, b;
    std::string label;
  };
  struct Stat {
    long long n = 0;
    double ms = 0.0;
  };
  int device_;
  std::vector<gpuEvent_t> free_;
  std::vector<Pending> pending_;
  gpuEvent_t open_ = nullptr;
  gpuEvent_t first_ = nullptr;  // the first op's start, kept for the span
  float span_ms_ = 0.0f;
  std::map<std::string, Stat> stats_;
  bool reported_ = false;
};

}  // namespace mlxcel::gpu
