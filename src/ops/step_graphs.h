#pragma once
// Decode steps recorded once per shape and replayed (DESIGN.md "Decode is captured"). A decode
// step launches the same kernels with the same arguments whenever its shape (tokens, sequences,
// logit rows, block-table width) and the memory it addresses (the activation workspace, the step
// block, the KV pool, the backend's own buffers) are unchanged: what differs from step to step
// (token ids, positions, block tables, lengths) is read from the step block's device memory. So
// the first step of a shape runs eagerly (growing any buffer it needs), the second is recorded,
// and every later one replays the recording with one launch instead of one host launch per op.
//
// A new recording is checked before it is kept: its replay and the same step run op by op must
// give bit-identical outputs (a step is idempotent: it rewrites the same K/V slots with the same
// values). A mismatch, which would mean some op bakes a per-step value into its launch, turns
// recording off for the model and fails that step with an error rather than letting a wrong
// replay write tokens.
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "ops/ops.h"

namespace mlxcel::ops {

class StepGraphs {
 public:
  struct Shape {
    std::int64_t tokens = 0, seqs = 0, rows = 0, max_blocks = 0;
    auto operator<=>(const Shape&) const = default;
  };
  // What recordings address besides the weights; any change makes every recording stale.
  struct Memory {
    const void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    const void* step = nullptr;
    std::size_t step_bytes = 0;
    const void* kv = nullptr;
    std::int64_t kv_blocks = 0;  // the pool's size sets its layer stride
    std::uint64_t epoch = 0;     // Backend::capture_epoch
    bool operator==(const Memory&) const = default;
  };
  struct Stats {
    // Steps run op by op, recordings kept (each checked), steps replayed, recordings abandoned
    // (an op had to grow a buffer); off: recording turned off after a check failed.
    std::int64_t eager = 0, recorded = 0, replayed = 0, failed = 0;
    bool off = false;
  };

  // Decode batches of at most this many sequences are recorded.
  static constexpr std::int64_t kMaxTokens = 64;
  // Recordings kept (batch sizes x block buckets); past it they are all dropped.
  static constexpr std::size_t kMaxShapes = 256;

  // Whether a step of `tokens` tokens over `seqs` sequences on `e` goes through run(): decode
  // steps only (one token per sequence, at most kMaxTokens), on a backend that can capture, with
  // no tap reading intermediates back to the host. Steps with prompt tokens run eagerly: their
  // shapes (any mix of chunk lengths) rarely repeat, and a recording costs two extra steps.
  static bool eligible(const Exec& e, std::int64_t tokens, std::int64_t seqs);
  // Runs `ops` (the whole step, launches only: no host copy, no synchronization, no allocation),
  // whose result is `out`: eagerly the first time `shape` is seen; the second time recorded,
  // checked and kept; replayed after. A recording that fails (an op had to grow a buffer) runs
  // the step eagerly; a shape that fails twice stays eager.
  void run(const Exec& e, const Shape& shape, const Memory& mem, const std::function<void()>& ops,
           const Act& out);
  const Stats& stats() const { return stats_; }

 private:
  // Records `ops`; null when an op threw while recording (nothing ran). Throws when the backend
  // cannot begin or end a recording.
  static std::unique_ptr<backend::Recording> record(Backend& be, const Shape& shape,
                                                    const std::function<void()>& ops);
  void turn_off();

  struct Entry {
    int failures = 0;
    std::unique_ptr<backend::Recording> rec;
  };
  std::map<Shape, Entry> entries_;
  Memory mem_;
  Stats stats_;
};

}  // namespace mlxcel::ops
