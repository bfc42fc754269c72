#pragma once
// The serving engine: one thread owns the model, the KV block pool and every slot; HTTP workers
// submit requests and read events through per-request channels. Continuous batching: between
// steps, waiting requests take free slots; each step runs one Model::forward over every active
// slot — a chunk of prompt for slots still prefilling (chunked prefill, interleaved with decode)
// and one token for each decoding slot. Prompt prefixes already in the KV cache are reused.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/kv_cache.h"
#include "runtime/step.h"
#include "models/model.h"
#include "runtime/chat.h"
#include "runtime/json_constraint.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "server/metrics.h"

namespace mlxcel::server {

struct TokenInfo {
  std::int32_t id = 0;
  float logprob = 0;
  std::vector<runtime::TokenLogprob> top;
};

struct EngineEvent {
  enum class Kind : std::uint8_t { kDelta, kDone, kError } kind = Kind::kDelta;
  std::string content;    // answer text
  std::string reasoning;  // text inside the reasoning markers
  std::vector<TokenInfo> tokens;  // the tokens behind this delta (for logprobs)
  std::string finish_reason;      // kDone: "stop" | "length" | "cancelled"
  std::int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int error_status = 500;         // kError
  std::string error_message;
};

// Thread-safe event queue between the engine thread and one HTTP connection.
class EventChannel {
 public:
  void push(EngineEvent e);
  // Waits up to `timeout`; returns nullopt on timeout.
  std::optional<EngineEvent> pop(std::chrono::milliseconds timeout);
  // Returns an event if one is waiting, without blocking.
  std::optional<EngineEvent> try_pop();
  // Called (on the pushing thread, without the lock held) after every push; the HTTP layer
  // uses it to wake the connection instead of parking a thread on pop(). An event already
  // waiting when the callback is set triggers it once at once.
  void set_notify(std::function<void()> fn);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<EngineEvent> q_;
  std::function<void()> notify_;
};

struct EngineRequest {
  std::vector<std::int32_t> prompt;
  runtime::SamplingParams sampling;
  std::int64_t max_tokens = 0;   // 0 = up to the context
  std::vector<std::string> stop;
  int top_logprobs = -1;         // -1: no logprobs
  bool split_reasoning = false;
  bool starts_in_reasoning = false;
  bool json_object = false;      // response_format json_object: constrained to one JSON object
  std::string cache_salt;        // prefix-cache isolation key: blocks are shared only within it
  bool debug_nan_logits =
      false;  // testing aid (--debug-nan-marker): this request's logits become NaN
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();

  std::atomic<bool> cancelled{false};
  EventChannel events;
  std::chrono::steady_clock::time_point submitted;
};

struct EngineOptions {
  int parallel = 4;                 // slots
  std::int64_t ctx_size = 4096;     // per slot
  std::size_t max_queue = 64;       // waiting requests beyond the slots
  std::int64_t prefill_chunk = 256; // prompt tokens per slot per step
  int block_size = 32;
  std::vector<std::int32_t> eos_ids;
  // Testing aid (mlxcel-server --debug-step-delay-ms): sleep after every engine step, so tests
  // can hold slots busy with a tiny model.
  std::chrono::milliseconds debug_step_delay{0};
};

class Engine {
 public:
  Engine(models::Model& model, const runtime::ChatFormatter& fmt, EngineOptions opts,
         ServerMetrics& metrics);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Returns false when the queue is full (the caller answers 429).
  // Throws bad_input when the prompt cannot fit a slot's context.
  bool submit(const std::shared_ptr<EngineRequest>& r);
  void stop();
  // stop() without waiting: the engine thread ends the running requests (503) and exits.
  void request_stop();
  // Graceful shutdown, first half: refuse new requests (submit throws unavailable) and answer
  // every queued one with 503; running requests continue until they finish or stop() ends them.
  void drain();
  // Marks `r` cancelled (its client left) and wakes the engine, which drops it from the queue or
  // frees its slot before the next step.
  void cancel(const std::shared_ptr<EngineRequest>& r);

  bool healthy() const { return healthy_.load(); }
  std::string unhealthy_reason() const;
  int active_slots() const { return active_.load(); }
  std::size_t queued() const;
  std::int64_t ctx_size() const { return opts_.ctx_size; }
  const runtime::KvBlockPool& pool() const { return *pool_; }

 private:
  struct Slot;
  void loop();
  runtime::Verdict on_token(Slot& s, const runtime::SampleResult& r, bool eos);
  void finish(Slot& s, const std::string& reason, const runtime::SequenceStats& st);
  // Ends one request with an error event; the other slots of the step are untouched.
  void fail(Slot& s, int status, const std::string& message);
  void json_allowed(Slot& s, std::vector<std::uint8_t>& allowed, const runtime::SequenceStats& st);
  const std::vector<std::string>& token_text();

  models::Model& model_;
  const runtime::ChatFormatter& fmt_;
  EngineOptions opts_;
  ServerMetrics& metrics_;
  std::unique_ptr<runtime::KvBlockPool> pool_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<EngineRequest>> queue_;
  bool stopping_ = false;
  bool draining_ = false;
  std::atomic<bool> healthy_{true};
  std::string unhealthy_reason_;
  std::atomic<int> active_{0};
  std::vector<std::string> token_text_;  // engine thread only: each token's text, for JSON masks
  std::thread thread_;
};

}  // namespace mlxcel::server
