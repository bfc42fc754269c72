#pragma once
// The slot order of mlx-lm's RotatingKVCache (the sliding-window cache of Gemma 3, Mistral,
// ...), replayed on positions. mlx-lm grows the window buffer, writes single decode tokens in
// place (wrapping around once full), and on a multi-token step puts it back in temporal order,
// keeps the last max_size - 1 entries and appends the chunk. Attention then reads the buffer
// in slot order. Our paged cache is in position order, which gives the same attention output
// up to the order of the fp32 sums; `--numerics mlx` visits keys in this order so that the sums,
// and so the logits, are bit-identical to mlx-lm's.
#include <cstdint>
#include <vector>

namespace mlxcel::runtime {

class RotatingOrder {
 public:
  // Starts over with a window of `max_size` (mlx-lm: max_size = sliding_window, keep = 0).
  void reset(std::int64_t max_size);
  std::int64_t max_size() const { return max_size_; }
  std::int64_t offset() const { return offset_; }

  // Records a step of `n` new tokens (n == 1: in-place update, else concatenation).
  void update(std::int64_t n);
  // Positions of the keys the last update's attention reads, in buffer order (-1: never
  // written, cannot occur after an update).
  std::vector<std::int64_t> keys() const;

 private:
  std::vector<std::int64_t> temporal(const std::vector<std::int64_t>& v) const;

  std::int64_t max_size_ = 0;
  std::int64_t offset_ = 0;
  std::int64_t idx_ = 0;
  std::vector<std::int64_t> slots_;
};

}  // namespace mlxcel::runtime
