#include "platform/preflight.h"
#include "server/engine.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/log.h"
#include "runtime/generator.h"
#include "runtime/stop_strings.h"
#include "tokenizer/reasoning.h"
#include "tokenizer/streaming_decoder.h"

namespace mlxcel::server {

void EventChannel::push(EngineEvent e) {
  std::function<void()> fn;
  {
    std::lock_guard<std::mutex> lock(mu_);
    q_.push_back(std::move(e));
    fn = notify_;
  }
  cv_.notify_one();
  if (fn) fn();
}

std::optional<EngineEvent> EventChannel::try_pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (q_.empty()) return std::nullopt;
  EngineEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

void EventChannel::set_notify(std::function<void()> fn) {
  bool pending = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notify_ = fn;
    pending = !q_.empty();
  }
  if (pending && fn) fn();
}

std::optional<EngineEvent> EventChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !q_.empty(); })) return std::nullopt;
  EngineEvent e = std::move(q_.front());
  q_.pop_front();
  return e;
}

namespace {
// A request that never started gets 503: the server stops taking work.
void reject_shutting_down(EngineRequest& r) {
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::kError;
  ev.error_status = 503;
  ev.error_message = "the server is shutting down";
  r.events.push(std::move(ev));
}
}  // namespace

// One request in the scheduler: turns its tokens into text events (detokenizer, stop strings,
// reasoning split, JSON mode) and its end into a done or error event.
struct Engine::Slot final : runtime::SequenceObserver {
  Slot(Engine& e, std::shared_ptr<EngineRequest> r, const Tokenizer& tok)
      : eng(e), req(std::move(r)), detok(tok, true), stop(req->stop) {}
  Engine& eng;
  std::shared_ptr<EngineRequest> req;
  runtime::Scheduler::Id id = 0;
  StreamingDecoder detok;
  runtime::StopMatcher stop;
  std::optional<ReasoningSplitter> split;
  std::optional<runtime::JsonPrefix> json;
  std::chrono::steady_clock::time_point last_token;
  bool first = true;  // the next token is the first one (time to first token)
  bool done = false;

  void on_admit(const runtime::SequenceStats& st) override {
    eng.metrics_.prefix_cache_hit_tokens_total.add(static_cast<double>(st.cached_tokens));
  }
  void on_prefill(std::int64_t tokens, bool) override {
    eng.metrics_.prompt_tokens_total.add(static_cast<double>(tokens));
  }
  bool allowed_tokens(std::vector<std::uint8_t>& allowed, const runtime::SequenceStats& st) override {
    if (!json) return false;
    eng.json_allowed(*this, allowed, st);
    return true;
  }
  runtime::Verdict on_token(const runtime::SampleResult& r, bool eos,
                            const runtime::SequenceStats&) override {
    return eng.on_token(*this, r, eos);
  }
  void on_finish(const std::string& reason, const runtime::SequenceStats& st) override {
    eng.finish(*this, reason, st);
  }
  void on_error(const Error& e, const runtime::SequenceStats&) override {
    // A per-request failure (non-finite logits, a constraint, sampling parameters) ends this
    // request alone; a failed step reaches every request of it through here too.
    LOG_WARN("request failed: " << e.what());
    const int status = e.category() == ErrorCategory::kBadInput      ? 400
                       : e.category() == ErrorCategory::kOutOfMemory ? 503
                                                                     : 500;
    eng.fail(*this, status, e.what());
  }
};

Engine::Engine(models::Model& model, const runtime::ChatFormatter& fmt, EngineOptions opts,
               ServerMetrics& metrics)
    : model_(model), fmt_(fmt), opts_(std::move(opts)), metrics_(metrics) {
  // Sized by the same rule the memory plan counts (platform/preflight.h), so what `serve
  // --estimate-memory` printed is what is allocated.
  const std::int64_t blocks = platform::kv_pool_blocks(opts_.ctx_size, opts_.block_size, opts_.parallel);
  pool_ = std::make_unique<runtime::KvBlockPool>(model_.kv_layout(blocks, opts_.block_size),
                                                 &model_.backend());
  metrics_.kv_blocks_total.set(static_cast<double>(blocks));
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { stop(); }

void Engine::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Engine::request_stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

std::string Engine::unhealthy_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unhealthy_reason_;
}

std::size_t Engine::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

bool Engine::submit(const std::shared_ptr<EngineRequest>& r) {
  const std::int64_t n = static_cast<std::int64_t>(r->prompt.size());
  if (n == 0) throw_error(ErrorCategory::kBadInput, "the prompt is empty");
  if (n >= opts_.ctx_size)
    throw_error(ErrorCategory::kBadInput,
                "the prompt has " + std::to_string(n) + " tokens but the context holds " +
                    std::to_string(opts_.ctx_size) + " (--ctx-size); shorten the prompt");
  const std::int64_t vocab = model_.config().vocab_size;
  for (auto t : r->prompt)
    if (t < 0 || t >= vocab)
      throw_error(ErrorCategory::kBadInput, "token id " + std::to_string(t) + " is outside the vocabulary");
  r->sampling.validate(vocab);
  r->submitted = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (draining_ || stopping_)
      throw_error(ErrorCategory::kOutOfMemory,
                  "the server is shutting down and takes no new requests");
    if (!healthy_.load())
      throw_error(ErrorCategory::kDeviceFault, "the engine is unhealthy: " + unhealthy_reason_);
    const std::size_t free_slots =
        static_cast<std::size_t>(std::max(0, opts_.parallel - active_.load()));
    if (queue_.size() >= opts_.max_queue + free_slots) return false;
    queue_.push_back(r);
    metrics_.queue_depth.set(static_cast<double>(queue_.size()));
  }
  metrics_.requests_total.add();
  cv_.notify_all();
  return true;
}

void Engine::finish(Slot& s, const std::string& reason, const runtime::SequenceStats& st) {
  if (s.done) return;
  s.done = true;
  // Release text held back by the detokenizer / stop matcher / reasoning splitter.
  EngineEvent tail;
  if (reason != "cancelled") {
    std::string rest = s.stop.stopped() ? "" : s.detok.flush() + s.stop.flush();
    if (s.split) {
      ReasoningDelta d = s.split->push(rest);
      ReasoningDelta f = s.split->flush();
      tail.content = d.content + f.content;
      tail.reasoning = d.reasoning + f.reasoning;
    } else {
      tail.content = rest;
    }
    if (!tail.content.empty() || !tail.reasoning.empty()) s.req->events.push(std::move(tail));
  }
  EngineEvent done;
  done.kind = EngineEvent::Kind::kDone;
  done.finish_reason = reason;
  done.prompt_tokens = static_cast<std::int64_t>(s.req->prompt.size());
  done.completion_tokens = st.generated;
  done.cached_tokens = st.cached_tokens;
  s.req->events.push(std::move(done));
  auto now = std::chrono::steady_clock::now();
  metrics_.request_seconds.observe(std::chrono::duration<double>(now - s.req->submitted).count());
  if (reason == "cancelled") metrics_.requests_cancelled_total.add();
}

void Engine::fail(Slot& s, int status, const std::string& message) {
  if (s.done) return;
  s.done = true;
  EngineEvent ev;
  ev.kind = EngineEvent::Kind::kError;
  ev.error_status = status;
  ev.error_message = message;
  s.req->events.push(std::move(ev));
  metrics_.requests_failed_total.add();
}

void Engine::drain() {
  std::deque<std::shared_ptr<EngineRequest>> queued;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    queued.swap(queue_);
    metrics_.queue_depth.set(0);
  }
  for (auto& r : queued) reject_shutting_down(*r);
  cv_.notify_all();
}

void Engine::cancel(const std::shared_ptr<EngineRequest>& r) {
  r->cancelled.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  cv_.notify_all();
}

void Engine::loop() {
  runtime::SchedulerOptions so;
  so.max_sequences = opts_.parallel;
  so.context_limit = opts_.ctx_size;
  so.prefill_chunk = opts_.prefill_chunk;
  runtime::Scheduler sched(model_, *pool_, so);
  std::vector<std::unique_ptr<Slot>> slots;
  auto drop_done = [&] {
    slots.erase(std::remove_if(slots.begin(), slots.end(), [](const auto& s) { return s->done; }),
                slots.end());
  };
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !slots.empty(); });
      if (stopping_) break;
      // Requests whose clients left while queued go now, not when they reach the front.
      const auto before = queue_.size();
      queue_.erase(std::remove_if(queue_.begin(), queue_.end(),
                                  [](const auto& r) { return r->cancelled.load(); }),
                   queue_.end());
      for (auto n = before - queue_.size(); n > 0; --n) metrics_.requests_cancelled_total.add();
      // Admit waiting requests into free slots (between steps: continuous batching).
      while (sched.has_capacity() && !queue_.empty()) {
        auto r = queue_.front();
        queue_.pop_front();
        if (r->cancelled.load()) {
          metrics_.requests_cancelled_total.add();
          continue;
        }
        auto s = std::make_unique<Slot>(*this, r, fmt_.tokenizer());
        if (r->json_object) s->json.emplace(true);
        if (r->split_reasoning) {
          const auto& mk = fmt_.reasoning_markers();
          s->split.emplace(mk.start, mk.end, r->starts_in_reasoning);
        }
        runtime::SequenceRequest q;
        q.prompt = r->prompt;
        q.sampling = r->sampling;
        q.max_tokens = r->max_tokens;
        q.eos_ids = opts_.eos_ids;
        q.top_logprobs = r->top_logprobs;  // -1: the response carries no logprobs
        q.cache_salt = r->cache_salt;
        q.debug_nan_logits = r->debug_nan_logits;
        try {
          s->id = sched.add(std::move(q), s.get());
        } catch (const Error& e) {
          fail(*s, e.category() == ErrorCategory::kBadInput ? 400 : 500, e.what());
          continue;
        }
        slots.push_back(std::move(s));
      }
      metrics_.queue_depth.set(static_cast<double>(queue_.size()));
    }
    active_.store(static_cast<int>(slots.size()));
    metrics_.active_slots.set(static_cast<double>(slots.size()));
    if (slots.empty()) continue;
    // Clients that left and deadlines that passed end their requests before the step.
    const auto now = std::chrono::steady_clock::now();
    for (auto& s : slots) {
      if (s->req->cancelled.load()) {
        sched.finish(s->id, "cancelled");
      } else if (now > s->req->deadline) {
        fail(*s, 503, "the request timed out (--timeout)");
        sched.finish(s->id, "timeout");
      }
    }
    drop_done();
    try {
      sched.step();
    } catch (const Error& e) {
      // The scheduler failed every request of the step. Only a device fault says the engine
      // itself is broken; the next step starts clean otherwise.
      LOG_ERROR("engine step failed: " << e.what());
      if (e.category() == ErrorCategory::kDeviceFault) {
        std::lock_guard<std::mutex> lock(mu_);
        healthy_.store(false);
        unhealthy_reason_ = e.what();
      }
    }
    drop_done();
    if (opts_.debug_step_delay.count() > 0) std::this_thread::sleep_for(opts_.debug_step_delay);
    // Gauges before active_: a client that sees /health idle also sees idle metrics.
    metrics_.kv_blocks_used.set(static_cast<double>(pool_->used_blocks()));
    metrics_.active_slots.set(static_cast<double>(slots.size()));
    active_.store(static_cast<int>(slots.size()));
  }
  // Shutdown: every waiting or active request gets an error (a stream ends with an error event,
  // not a normal finish, so the client knows the answer is incomplete).
  for (auto& s : slots) {
    if (s->req->cancelled.load()) {
      sched.finish(s->id, "cancelled");
    } else {
      fail(*s, 503, "the server is shutting down; the answer is incomplete");
      sched.finish(s->id, "shutdown");
    }
  }
  slots.clear();
  active_.store(0);
  metrics_.active_slots.set(0);
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& r : queue_) reject_shutting_down(*r);
  queue_.clear();
}

runtime::Verdict Engine::on_token(Slot& s, const runtime::SampleResult& r, bool eos) {
  auto t = std::chrono::steady_clock::now();
  if (s.first) metrics_.ttft_seconds.observe(std::chrono::duration<double>(t - s.req->submitted).count());
  else metrics_.inter_token_seconds.observe(std::chrono::duration<double>(t - s.last_token).count());
  s.first = false;
  s.last_token = t;
  if (eos) return runtime::Verdict::kStop;  // the scheduler ends it with "stop"
  metrics_.generated_tokens_total.add();
  auto m = s.stop.push(s.detok.push(r.token));
  EngineEvent ev;
  if (s.split) {
    ReasoningDelta d = s.split->push(m.emit);
    ev.content = std::move(d.content);
    ev.reasoning = std::move(d.reasoning);
  } else {
    ev.content = std::move(m.emit);
  }
  if (s.req->top_logprobs >= 0) ev.tokens.push_back({r.token, r.logprob, r.top});
  if (!ev.content.empty() || !ev.reasoning.empty() || !ev.tokens.empty()) s.req->events.push(std::move(ev));
  if (m.stopped) return runtime::Verdict::kStop;
  if (s.json) {
    const auto& text = token_text();
    const bool fed = static_cast<std::size_t>(r.token) < text.size() && s.json->feed(text[static_cast<std::size_t>(r.token)]);
    if (!fed) return runtime::Verdict::kLength;  // no allowed token was left (non-byte vocabulary)
    if (s.json->complete()) return runtime::Verdict::kStop;
  }
  return runtime::Verdict::kContinue;
}

const std::vector<std::string>& Engine::token_text() {
  if (!token_text_.empty()) return token_text_;
  // The text each token adds in the middle of a sequence: decode(anchor, t) minus decode(anchor),
  // which keeps the leading space SentencePiece decoders drop at the start. Special tokens and
  // tokens that are part of a UTF-8 character (they decode to U+FFFD alone) get "" and are never
  // allowed in JSON mode, so the automaton always sees exactly the bytes the client receives.
  const Tokenizer& tok = fmt_.tokenizer();
  const auto vocab = static_cast<std::size_t>(model_.config().vocab_size);
  token_text_.assign(vocab, std::string());
  std::optional<std::int32_t> anchor = tok.token_to_id("a");
  std::string anchor_text;
  if (anchor) anchor_text = tok.decode(std::vector<std::int32_t>{*anchor});
  for (std::size_t t = 0; t < vocab && t < tok.vocab_size(); ++t) {
    const auto id = static_cast<std::int32_t>(t);
    if (tok.is_special(id)) continue;
    std::string text;
    if (anchor) {
      std::string both = tok.decode(std::vector<std::int32_t>{*anchor, id});
      if (both.compare(0, anchor_text.size(), anchor_text) == 0) text = both.substr(anchor_text.size());
      else text = tok.decode(std::vector<std::int32_t>{id});
    } else {
      text = tok.decode(std::vector<std::int32_t>{id});
    }
    if (text.find("\xEF\xBF\xBD") != std::string::npos) continue;
    token_text_[t] = std::move(text);
  }
  if (token_text_.empty()) token_text_.assign(1, std::string());
  return token_text_;
}

void Engine::json_allowed(Slot& s, std::vector<std::uint8_t>& allowed,
                          const runtime::SequenceStats& st) {
  const auto& text = token_text();
  std::int64_t remaining = opts_.ctx_size - st.kv_length;
  if (s.req->max_tokens > 0) remaining = std::min(remaining, s.req->max_tokens - st.generated);
  const std::size_t n = std::min(static_cast<std::size_t>(model_.config().vocab_size), text.size());
  // Tokens past the tokenizer's vocabulary (padded embedding rows) stay removed.
  runtime::json_token_mask(*s.json, std::span<const std::string>(text.data(), n), remaining, allowed);
}

}  // namespace mlxcel::server
