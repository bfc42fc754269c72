#include "runtime/stop_strings.h"

#include <algorithm>

namespace mlxcel::runtime {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Result StopMatcher::push(std::string_view piece) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  pending_.append(piece);
  // Earliest complete match wins (the text before it is emitted).
  std::size_t best = std::string::npos;
  int which = -1;
  for (std::size_t i = 0; i < stops_.size(); ++i) {
    std::size_t pos = pending_.find(stops_[i]);
    if (pos != std::string::npos && pos < best) {
      best = pos;
      which = static_cast<int>(i);
    }
  }
  if (which >= 0) {
    r.emit = pending_.substr(0, best);
    r.stopped = true;
    r.which = which;
    stopped_ = true;
    pending_.clear();
    return r;
  }
  // Hold back the longest suffix of pending_ that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const auto& s : stops_) {
    std::size_t max_k = std::min(s.size() - 1, pending_.size());
    for (std::size_t k = max_k; k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  r.emit = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return r;
}

std::string StopMatcher::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace mlxcel::runtime
