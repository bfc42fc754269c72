#include "runtime/scheduler.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "runtime/step.h"

namespace mlxcel::runtime {

struct Scheduler::Sequence {
  Sequence(Id i, SequenceRequest r, SequenceObserver* o, KvBlockPool& pool)
      : id(i), req(std::move(r)), obs(o), kv(pool), sampler(req.sampling, 0) {}
  Id id;
  SequenceRequest req;
  SequenceObserver* obs;
  SequenceKv kv;
  Sampler sampler;
  std::vector<std::int32_t> history;  // prompt + generated
  std::size_t prefilled = 0;
  std::int32_t next_input = -1;       // the sampled token the next step feeds
  SequenceStats stats;
  bool done = false;
};

Scheduler::Scheduler(models::Model& model, KvBlockPool& pool, SchedulerOptions opts)
    : model_(model), pool_(pool), opts_(opts) {}

Scheduler::~Scheduler() = default;

void Scheduler::validate(const SequenceRequest& r) const {
  const auto n = static_cast<std::int64_t>(r.prompt.size());
  MLXCEL_CHECK(n > 0, ErrorCategory::kBadInput, "the prompt is empty");
  if (n >= opts_.context_limit)
    throw_error(ErrorCategory::kBadInput,
                "the prompt has " + std::to_string(n) + " tokens but the context holds " +
                    std::to_string(opts_.context_limit) +
                    " (--ctx-size); shorten the prompt or raise --ctx-size");
  const std::int64_t vocab = model_.config().vocab_size;
  r.sampling.validate(vocab);
  for (std::int32_t t : r.prompt)
    if (t < 0 || t >= vocab)
      throw_error(ErrorCategory::kBadInput, "prompt token id " + std::to_string(t) +
                                                " is outside the vocabulary (0.." +
                                                std::to_string(vocab - 1) + ")");
}

Scheduler::Id Scheduler::add(SequenceRequest r, SequenceObserver* obs) {
  validate(r);
  auto s = std::make_unique<Sequence>(next_id_++, std::move(r), obs, pool_);
  if (!s->req.cache_salt.empty()) s->kv.set_cache_salt(s->req.cache_salt);
  const std::int64_t cached = s->req.reuse_prefix ? s->kv.reuse_prefix(s->req.prompt) : 0;
  s->prefilled = static_cast<std::size_t>(cached);
  s->history = s->req.prompt;
  s->stats.prompt_tokens = static_cast<std::int64_t>(s->req.prompt.size());
  s->stats.cached_tokens = cached;
  s->stats.kv_length = s->kv.length();
  s->obs->on_admit(s->stats);
  const Id id = s->id;
  active_.push_back(std::move(s));
  return id;
}

void Scheduler::end(Sequence& s, const std::string& reason) {
  if (s.done) return;
  s.done = true;
  s.stats.kv_length = s.kv.length();
  s.obs->on_finish(reason, s.stats);
}

void Scheduler::finish(Id id, const std::string& reason) {
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if ((*it)->id != id) continue;
    end(**it, reason);
    active_.erase(it);
    return;
  }
}

void Scheduler::fail(Id id, const Error& e) {
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if ((*it)->id != id) continue;
    Sequence& s = **it;
    if (!s.done) {
      s.done = true;
      s.obs->on_error(e, s.stats);
    }
    active_.erase(it);
    return;
  }
}

void Scheduler::sample(std::span<Sequence* const> seqs, std::span<const std::int64_t> rows,
                       ops::Act logits) {
  const std::int64_t vocab = logits.cols;
  const std::int64_t words = ops::mask_words(vocab);
  std::vector<backend::SampleRow> args;
  std::vector<backend::SampleProc> procs;
  std::vector<std::uint32_t> masks;
  std::vector<Sequence*> drawn;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    Sequence& s = *seqs[i];
    s.stats.kv_length = s.kv.length();
    try {
      backend::SampleRow r = s.sampler.row(s.history, static_cast<std::int64_t>(s.history.size()),
                                           std::max(0, s.req.top_logprobs), procs);
      r.logit_row = rows[i];
      r.logprobs = s.req.top_logprobs >= 0 ? 1 : 0;
      r.debug_nan = s.req.debug_nan_logits ? 1 : 0;
      allowed_.clear();
      if (s.obs->allowed_tokens(allowed_, s.stats)) {
        r.mask_row = static_cast<std::int32_t>(masks.size() / static_cast<std::size_t>(words));
        masks.resize(masks.size() + static_cast<std::size_t>(words), 0u);
        std::uint32_t* m = masks.data() + masks.size() - words;
        const std::int64_t n = std::min<std::int64_t>(vocab, static_cast<std::int64_t>(allowed_.size()));
        for (std::int64_t t = 0; t < n; ++t)
          if (allowed_[t]) m[t >> 5] |= 1u << (t & 31);
      }
      args.push_back(r);
      drawn.push_back(&s);
    } catch (const Error& e) {
      s.done = true;
      s.obs->on_error(e, s.stats);
    }
  }
  const std::vector<backend::SampleOut> outs =
      sampling_.run(model_.exec(), logits, args, procs, masks, words);
  for (std::size_t i = 0; i < drawn.size(); ++i) accept(*drawn[i], outs[i]);
}

void Scheduler::accept(Sequence& s, const backend::SampleOut& o) {
  if (o.status != backend::SampleStatus::kOk) {
    // A sequence whose logits are not finite fails alone; the others in the step go on.
    const Error e(ErrorCategory::kInternal,
                  o.status == backend::SampleStatus::kNonFinite
                      ? "the model produced non-finite logits (NaN or +inf) for this request; the "
                        "checkpoint or its quantization may be damaged, or the numbers overflowed "
                        "for this prompt"
                      : "every token was removed before sampling (the output constraint allows none)");
    s.done = true;
    s.obs->on_error(e, s.stats);
    return;
  }
  const SampleResult r = to_result(o);
  const auto& eos_ids = s.req.eos_ids;
  const bool eos =
      !s.req.ignore_eos && std::find(eos_ids.begin(), eos_ids.end(), r.token) != eos_ids.end();
  const Verdict v = s.obs->on_token(r, eos, s.stats);
  if (eos) return end(s, "stop");
  s.history.push_back(r.token);
  s.stats.generated++;
  if (v == Verdict::kStop) return end(s, "stop");
  if (v == Verdict::kLength) return end(s, "length");
  const bool max_reached = s.req.max_tokens > 0 && s.stats.generated >= s.req.max_tokens;
  const bool ctx_full = s.kv.length() + 1 >= opts_.context_limit;
  if (max_reached || ctx_full) return end(s, "length");
  s.next_input = r.token;
}

void Scheduler::step() {
  std::vector<BatchItem> batch;
  std::vector<Sequence*> owners;
  for (auto& p : active_) {
    Sequence& s = *p;
    if (s.done) continue;
    const auto& prompt = s.req.prompt;
    if (s.prefilled < prompt.size()) {
      const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(opts_.prefill_chunk),
                                                  prompt.size() - s.prefilled);
      batch.push_back({&s.kv, std::span<const std::int32_t>(prompt).subspan(s.prefilled, n), false});
    } else {
      batch.push_back({&s.kv, std::span<const std::int32_t>(&s.next_input, 1), false});
    }
    owners.push_back(&s);
  }
  if (!batch.empty()) {
    auto fail_all = [&](const Error& e) {
      for (auto& p : active_) {
        if (p->done) continue;
        p->done = true;
        p->obs->on_error(e, p->stats);
      }
      active_.clear();
    };
    // A failure of the step or of its sampling (a device fault, out of memory) fails every
    // sequence of the step.
    auto guarded = [&](auto&& fn) {
      try {
        fn();
      } catch (const Error& e) {
        fail_all(e);
        throw;
      } catch (const std::bad_alloc&) {
        const Error e(ErrorCategory::kOutOfMemory,
                      "out of memory while computing this step; retry with a shorter prompt or "
                      "fewer parallel requests");
        fail_all(e);
        throw e;
      }
    };
    ops::Act logits;
    guarded([&] { logits = forward_step_device(model_, batch); });
    std::vector<Sequence*> to_sample;
    std::vector<std::int64_t> rows;
    for (std::size_t b = 0; b < owners.size(); ++b) {
      Sequence& s = *owners[b];
      const auto& prompt = s.req.prompt;
      if (s.prefilled < prompt.size()) {
        s.prefilled += batch[b].tokens.size();
        const bool complete = s.prefilled >= prompt.size();
        s.obs->on_prefill(static_cast<std::int64_t>(batch[b].tokens.size()), complete);
        if (!complete) continue;
      }
      to_sample.push_back(&s);
      rows.push_back(static_cast<std::int64_t>(b));
    }
    if (!to_sample.empty()) guarded([&] { sample(to_sample, rows, logits); });
  }
  active_.erase(std::remove_if(active_.begin(), active_.end(), [](const auto& s) { return s->done; }),
                active_.end());
}

}  // namespace mlxcel::runtime
