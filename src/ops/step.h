#pragma once
// The per-step metadata block (DESIGN.md "Execution"): what one forward step computes, built on
// the host by the runtime's scheduler and reaching the device in one copy. Models read it only
// through the StepView this uploads.
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace mlxcel::ops {

struct StepInputs {
  // Per token of the step, sequences one after the other.
  std::vector<std::int32_t> tokens, positions, seq_of_token;
  // Per sequence: its block table (rows of max_blocks, -1 padded) and its length after the step.
  std::int64_t n_seqs = 0, max_blocks = 0;
  std::vector<std::int32_t> block_tables, seq_lens;
  // Token rows whose logits are wanted, in output order; logit_count[i] of them belong to
  // sequence i (1: its last token; all its tokens for traces).
  std::vector<std::int32_t> logit_rows;
  std::vector<std::int64_t> logit_count;
  // CPU `--numerics mlx` only (Backend::wants_window_order): per sequence, key positions in
  // mlx-lm's rotating-cache slot order; empty = position order.
  std::vector<std::vector<std::int64_t>> window_order;

  std::int64_t n_tokens() const { return static_cast<std::int64_t>(tokens.size()); }
};

// The device copy of a StepInputs: one allocation, reused while it is large enough.
class StepBlock {
 public:
  // `bucket_blocks`: block tables padded (with -1) to the next power of two of max_blocks, so a
  // recorded step's shape changes only when a sequence's block count doubles (StepGraphs).
  backend::StepView upload(backend::Backend& be, const StepInputs& s, bool bucket_blocks = false);
  // The memory the device views point into (the host block where host memory is device memory)
  // and its capacity: a recorded step addresses it.
  const void* data() const { return buf_ ? buf_->data() : packed_.data(); }
  std::size_t bytes() const {
    return buf_ ? buf_->bytes() : packed_.capacity() * sizeof(std::int32_t);
  }
  const std::int32_t* logit_rows() const { return logit_rows_; }
  const std::int32_t* host_logit_rows() const { return host_logit_rows_; }

 private:
  std::vector<std::int32_t> packed_;
  std::shared_ptr<backend::DeviceBuffer> buf_;
  const std::int32_t* logit_rows_ = nullptr;
  const std::int32_t* host_logit_rows_ = nullptr;
};

}  // namespace mlxcel::ops
