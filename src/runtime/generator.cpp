#include "runtime/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"

namespace mlxcel::runtime {

std::int64_t blocks_for(std::int64_t tokens, int block_size, int sequences) {
  return ((tokens + block_size - 1) / block_size) * sequences;
}

GenerationResult generate(models::Model& model, KvBlockPool& pool,
                          std::span<const std::int32_t> prompt, const GenerationConfig& cfg,
                          const TokenCallback& on_token, bool reuse_prefix) {
  using clock = std::chrono::steady_clock;
  const auto& mc = model.config();
  const std::int64_t ctx = mc.context_length() > 0 ? mc.context_length() : (1 << 30);
  const std::int64_t pool_tokens = pool.num_blocks() * pool.config().block_size;
  SchedulerOptions opts;
  opts.max_sequences = 1;
  opts.context_limit = std::min(ctx, pool_tokens);
  opts.prefill_chunk = std::max<std::int64_t>(1, cfg.prefill_chunk);
  Scheduler sched(model, pool, opts);

  SequenceRequest req;
  req.prompt.assign(prompt.begin(), prompt.end());
  req.sampling = cfg.sampling;
  req.max_tokens = cfg.max_tokens;
  req.eos_ids = cfg.eos_ids;
  req.ignore_eos = cfg.ignore_eos;
  req.top_logprobs = cfg.top_logprobs;
  req.reuse_prefix = reuse_prefix;

  // Collects the tokens, forwards them to the caller and keeps the timings.
  struct Collector final : SequenceObserver {
    const GenerationConfig& cfg;
    const TokenCallback& cb;
    GenerationResult res;
    clock::time_point t0 = clock::now(), t1 = t0;
    std::optional<Error> error;
    Collector(const GenerationConfig& c, const TokenCallback& f) : cfg(c), cb(f) {}
    void on_prefill(std::int64_t, bool complete) override {
      if (complete) t1 = clock::now();
    }
    Verdict on_token(const SampleResult& r, bool eos, const SequenceStats&) override {
      if (cfg.max_tokens <= 0) return Verdict::kLength;  // prefill only
      res.tokens.push_back(r.token);
      return cb(r, eos) ? Verdict::kContinue : Verdict::kStop;
    }
    void on_finish(const std::string& reason, const SequenceStats& s) override {
      res.finish_reason = reason;
      res.prompt_tokens = s.prompt_tokens;
      res.cached_prompt_tokens = s.cached_tokens;
    }
    void on_error(const Error& e, const SequenceStats&) override { error = e; }
  } obs(cfg, on_token);

  sched.add(std::move(req), &obs);
  while (!sched.idle()) sched.step();
  if (obs.error) throw *obs.error;
  obs.res.prefill_seconds = std::chrono::duration<double>(obs.t1 - obs.t0).count();
  obs.res.decode_seconds = std::chrono::duration<double>(clock::now() - obs.t1).count();
  return obs.res;
}

}  // namespace mlxcel::runtime
