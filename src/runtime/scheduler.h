#pragma once
// The one scheduler (DESIGN.md "Execution"): continuous batching of sequences over one model and
// one KV pool. Each step runs one forward over every active sequence (a prefill chunk, or the last
// sampled token), samples the sequences whose prompt is done, and ends those that reach EOS,
// max_tokens, the context limit, or a stop their observer reports. `runtime::generate` (the CLI,
// benchmarks) and the server's engine both drive it; callers observe their sequences through
// SequenceObserver, so the runtime never knows about HTTP or terminals.
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model.h"
#include "ops/sample.h"
#include "runtime/kv_cache.h"
#include "runtime/sampler.h"

namespace mlxcel::runtime {

struct SequenceRequest {
  std::vector<std::int32_t> prompt;
  SamplingParams sampling;
  std::int64_t max_tokens = 0;  // 0: up to the context limit
  std::vector<std::int32_t> eos_ids;
  bool ignore_eos = false;
  // Alternatives reported per token; -1: no logprobs at all (tokens carry logprob 0 and
  // sampling skips the softmax normalizer), as for a server request without `logprobs`.
  int top_logprobs = 0;
  bool reuse_prefix = true;
  std::string cache_salt;       // prefix blocks are shared only between equal salts
  bool debug_nan_logits = false;  // test hook: the sampled logits get a NaN (fails this sequence)
};

// What the observer says after a token.
enum class Verdict : std::uint8_t { kContinue = 0, kStop = 1, kLength = 2 };

struct SequenceStats {
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_tokens = 0;     // prompt tokens whose K/V came from the prefix cache
  std::int64_t generated = 0;         // sampled tokens, EOS excluded
  std::int64_t kv_length = 0;
};

class SequenceObserver {
 public:
  virtual ~SequenceObserver() = default;
  // Admitted: the prompt's cached prefix is known (stats.cached_tokens).
  virtual void on_admit(const SequenceStats& s) {}
  // A prompt chunk of `tokens` was computed; `complete`: the prompt is done.
  virtual void on_prefill(std::int64_t tokens, bool complete) {}
  // Before sampling: the tokens this sequence may draw (a JSON-mode grammar). Return false for
  // no restriction, else true with `allowed` holding one byte per vocabulary entry (0: removed;
  // entries past its size are removed). A thrown Error fails this sequence alone.
  virtual bool allowed_tokens(std::vector<std::uint8_t>& allowed, const SequenceStats& s) {
    return false;
  }
  // Every sampled token, EOS included (then `eos` is true and the sequence ends with "stop"
  // whatever is returned).
  virtual Verdict on_token(const SampleResult& r, bool eos, const SequenceStats& s) = 0;
  // The sequence ended: "stop", "length" or a caller's reason given to Scheduler::finish.
  virtual void on_finish(const std::string& reason, const SequenceStats& s) = 0;
  // The sequence failed (its logits were not finite, its constraint or sampling threw, or the
  // step failed); it is removed.
  virtual void on_error(const Error& e, const SequenceStats& s) = 0;
};

struct SchedulerOptions {
  int max_sequences = 1;
  std::int64_t context_limit = 4096;  // tokens per sequence (prompt + generated)
  std::int64_t prefill_chunk = 512;   // prompt tokens per sequence per step
};

class Scheduler {
 public:
  using Id = std::uint64_t;
  Scheduler(models::Model& model, KvBlockPool& pool, SchedulerOptions opts);
  ~Scheduler();

  // Checks the request (empty or too long prompt, token ids, sampling parameters) and throws
  // bad_input naming what is wrong; nothing is admitted then.
  void validate(const SequenceRequest& r) const;
  bool has_capacity() const { return static_cast<int>(active_.size()) < opts_.max_sequences; }
  // Admits a sequence (validated, prefix reused). `obs` must outlive it.
  Id add(SequenceRequest r, SequenceObserver* obs);
  // Ends a sequence now with `reason` (a cancelled client, a deadline); on_finish is called.
  void finish(Id id, const std::string& reason);
  // Fails a sequence now; on_error is called.
  void fail(Id id, const Error& e);
  bool idle() const { return active_.empty(); }
  std::size_t active() const { return active_.size(); }

  // One forward step over every active sequence. A failure of the step itself (a device fault,
  // out of memory) fails every active sequence and is rethrown as an Error.
  void step();

  std::int64_t context_limit() const { return opts_.context_limit; }
  const KvBlockPool& pool() const { return pool_; }

 private:
  struct Sequence;
  void end(Sequence& s, const std::string& reason);
  void sample(std::span<Sequence* const> seqs, std::span<const std::int64_t> rows, ops::Act logits);
  void accept(Sequence& s, const backend::SampleOut& o);

  models::Model& model_;
  KvBlockPool& pool_;
  SchedulerOptions opts_;
  Id next_id_ = 1;
  std::vector<std::unique_ptr<Sequence>> active_;
  ops::Sampling sampling_;
  std::vector<std::uint8_t> allowed_;
};

}  // namespace mlxcel::runtime
