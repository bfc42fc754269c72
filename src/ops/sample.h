#pragma once
// The sampling op (DESIGN.md "Execution"): the step's logits stay on the device; the runtime
// hands per-row parameters, logit processors and allowed-token masks in, and only the sampled
// tokens (with their log-probabilities and the top ones asked for) come back. Inputs go up in one
// copy and results come down in one.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "ops/ops.h"

namespace mlxcel::ops {

using backend::SampleOut;
using backend::SampleProc;
using backend::SampleRow;

class Sampling {
 public:
  // Samples rows of `logits` ([R, vocab], device). `masks` holds `mask_words` words per mask row
  // (SampleRow::mask_row). Throws internal for inconsistent arguments.
  std::vector<SampleOut> run(const Exec& e, Act logits, std::span<const SampleRow> rows,
                             std::span<const SampleProc> procs,
                             std::span<const std::uint32_t> masks, std::int64_t mask_words);

 private:
  std::vector<std::uint8_t> staging_;
  std::shared_ptr<backend::DeviceBuffer> in_, scratch_, out_, host_in_, host_out_;
};

// The words of an allowed-token bitmask over `vocab` tokens.
inline std::int64_t mask_words(std::int64_t vocab) { return (vocab + 31) / 32; }

}  // namespace mlxcel::ops
