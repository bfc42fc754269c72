#include "ops/step_graphs.h"

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace mlxcel::ops {

bool StepGraphs::eligible(const Exec& e, std::int64_t tokens, std::int64_t seqs) {
  return tokens > 0 && tokens == seqs && tokens <= kMaxTokens && !e.tap &&
         e.backend().can_capture();
}

void StepGraphs::run(const Exec& e, const Shape& shape, const Memory& mem,
                     const std::function<void()>& ops, const Act& out) {
  Backend& be = e.backend();
  if (stats_.off) {
    ++stats_.eager;
    return ops();
  }
  if (!(mem == mem_) || entries_.size() >= kMaxShapes) {
    entries_.clear();  // recorded against other addresses (or too many shapes): drop them all
    mem_ = mem;
  }
  auto it = entries_.find(shape);
  if (it == entries_.end()) {
    entries_.emplace(shape, Entry{});
    ++stats_.eager;
    return ops();  // first sight: grows whatever the step needs before anything is recorded
  }
  Entry& en = it->second;
  if (en.rec) {
    ++stats_.replayed;
    try {
      return be.replay(*en.rec);
    } catch (const Error&) {
      turn_off();  // the step fails (part of it may have run); later steps run op by op
      throw;
    }
  }
  if (en.failures >= 2) {
    ++stats_.eager;
    return ops();
  }
  std::unique_ptr<backend::Recording> rec;
  try {
    rec = record(be, shape, ops);
  } catch (const Error& err) {
    // The backend could not record at all: off for good (a device fault shows again below).
    LOG_WARN("decode step recording failed on " << be.name() << ", running op by op: "
                                                << err.what());
    turn_off();
    ++stats_.eager;
    return ops();
  }
  if (!rec) {
    ++en.failures;
    ++stats_.failed;
    ++stats_.eager;
    return ops();  // nothing recorded has run
  }
  // The check: replay, then the same step op by op over it; the outputs must match bit for bit.
  const std::size_t n = static_cast<std::size_t>(out.rows * out.cols);
  std::vector<float> replayed(n), eager(n);
  try {
    be.replay(*rec);
    to_host(e, out, replayed.data());
  } catch (const Error&) {
    turn_off();
    throw;
  }
  ops();
  to_host(e, out, eager.data());
  if (std::memcmp(replayed.data(), eager.data(), n * sizeof(float)) != 0) {
    turn_off();
    throw_error(ErrorCategory::kInternal,
                "a recorded decode step (" + std::to_string(shape.tokens) + " tokens) gave other "
                "logits than the same step run op by op on " + be.name() +
                "; step recording is now off for this model. Please report it with the output "
                "of `mlxcel selftest`; MLXCEL_GPU_GRAPHS=0 turns recording off from the start");
  }
  en.rec = std::move(rec);
  ++stats_.recorded;
  LOG_DEBUG("step graph: recorded and checked " << shape.tokens << " tokens, " << shape.seqs
                                                << " sequences, " << shape.max_blocks
                                                << " blocks");
}

std::unique_ptr<backend::Recording> StepGraphs::record(Backend& be, const Shape& shape,
                                                      const std::function<void()>& ops) {
  be.begin_capture();
  try {
    ops();
  } catch (const Error& err) {
    // An op had to grow a buffer (or refused): drop the recording; the caller runs eagerly.
    LOG_DEBUG("step graph: recording of " << shape.tokens << " tokens abandoned: " << err.what());
    (void)be.end_capture();
    return nullptr;
  } catch (...) {
    (void)be.end_capture();
    throw;
  }
  return be.end_capture();
}

void StepGraphs::turn_off() {
  stats_.off = true;
  entries_.clear();
}

}  // namespace mlxcel::ops
