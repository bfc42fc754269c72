#include "runtime/rotating_order.h"

#include <algorithm>

namespace mlxcel::runtime {

namespace {
constexpr std::int64_t kGrowStep = 256;  // RotatingKVCache.step
}  // namespace

void RotatingOrder::reset(std::int64_t max_size) {
  max_size_ = max_size;
  offset_ = idx_ = 0;
  slots_.clear();
}

std::vector<std::int64_t> RotatingOrder::temporal(const std::vector<std::int64_t>& v) const {
  const auto size = static_cast<std::int64_t>(v.size());
  if (idx_ == size) return v;
  if (idx_ < offset_) {
    std::vector<std::int64_t> o(v.begin() + idx_, v.end());
    o.insert(o.end(), v.begin(), v.begin() + idx_);
    return o;
  }
  return std::vector<std::int64_t>(v.begin(), v.begin() + idx_);
}

void RotatingOrder::update(std::int64_t n) {
  if (n > 1) {
    if (!slots_.empty()) {
      slots_ = temporal(slots_);
      idx_ = static_cast<std::int64_t>(slots_.size());
      const std::int64_t trim = idx_ - max_size_ + 1;
      if (trim > 0) slots_.erase(slots_.begin(), slots_.begin() + trim);
    }
    for (std::int64_t i = 0; i < n; ++i) slots_.push_back(offset_ + i);
    offset_ += n;
    idx_ = static_cast<std::int64_t>(slots_.size());
    return;
  }
  const std::int64_t prev = offset_;
  auto size = static_cast<std::int64_t>(slots_.size());
  if (slots_.empty() || (prev >= size && size < max_size_)) {
    slots_.resize(static_cast<std::size_t>(size + std::min(kGrowStep, max_size_ - prev)), -1);
    idx_ = prev;
  }
  size = static_cast<std::int64_t>(slots_.size());
  if (size > max_size_) {
    slots_.erase(slots_.begin(), slots_.begin() + (size - max_size_));
    idx_ = max_size_;
  }
  if (idx_ == max_size_) idx_ = 0;
  slots_[static_cast<std::size_t>(idx_)] = offset_;
  offset_ += 1;
  idx_ += 1;
}

std::vector<std::int64_t> RotatingOrder::keys() const {
  if (offset_ < static_cast<std::int64_t>(slots_.size()))
    return std::vector<std::int64_t>(slots_.begin(), slots_.begin() + offset_);
  return slots_;
}

}  // namespace mlxcel::runtime
