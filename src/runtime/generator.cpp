#include "runtime/generator.h"

#include <algorithm>
#include <chrono>

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
  const std::int64_t limit = std::min(ctx, pool_tokens);
  MLXCEL_CHECK(!prompt.empty(), ErrorCategory::kBadInput, "the prompt is empty");
  if (static_cast<std::int64_t>(prompt.size()) >= limit)
    throw_error(ErrorCategory::kBadInput,
                "the prompt has " + std::to_string(prompt.size()) +
                    " tokens but the context holds " + std::to_string(limit) +
                    " (model max_position_embeddings " + std::to_string(ctx) +
                    ", KV cache " + std::to_string(pool_tokens) +
                    "); shorten the prompt or raise --ctx-size");
  const std::int64_t vocab = mc.vocab_size;
  cfg.sampling.validate(vocab);
  for (std::int32_t t : prompt)
    if (t < 0 || t >= vocab)
      throw_error(ErrorCategory::kBadInput, "prompt token id " + std::to_string(t) +
                                                " is outside the vocabulary (0.." +
                                                std::to_string(vocab - 1) + ")");

  GenerationResult res;
  res.prompt_tokens = static_cast<std::int64_t>(prompt.size());
  SequenceKv kv(pool);
  std::int64_t done = reuse_prefix ? kv.reuse_prefix(prompt) : 0;
  res.cached_prompt_tokens = done;

  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  Sampler sampler(cfg.sampling, 0);
  std::vector<std::vector<float>> logits;
  auto t0 = clock::now();
  const std::int64_t chunk = std::max<std::int64_t>(1, cfg.prefill_chunk);
  while (done < res.prompt_tokens) {
    std::int64_t n = std::min(chunk, res.prompt_tokens - done);
    std::vector<BatchItem> b = {{&kv, prompt.subspan(static_cast<std::size_t>(done), static_cast<std::size_t>(n)), false}};
    forward_step(model, b, logits);
    done += n;
  }
  auto t1 = clock::now();
  res.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  res.finish_reason = "length";
  for (std::int64_t i = 0; i < cfg.max_tokens; ++i) {
    SampleResult r = sampler.sample(logits[0], history, cfg.top_logprobs);
    const bool eos = !cfg.ignore_eos &&
                     std::find(cfg.eos_ids.begin(), cfg.eos_ids.end(), r.token) != cfg.eos_ids.end();
    res.tokens.push_back(r.token);
    history.push_back(r.token);
    if (!on_token(r, eos) || eos) {
      res.finish_reason = "stop";
      break;
    }
    if (kv.length() + 1 >= limit) break;  // context full: "length"
    if (i + 1 == cfg.max_tokens) break;
    std::vector<BatchItem> b = {{&kv, std::span<const std::int32_t>(&history.back(), 1), false}};
    forward_step(model, b, logits);
  }
  res.decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
  return res;
}

}  // namespace mlxcel::runtime
