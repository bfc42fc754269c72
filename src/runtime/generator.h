#pragma once
// Single-sequence generation on the one scheduler (runtime/scheduler.h): prefill in chunks, then
// decode one token per step, sampling with mlx-lm's semantics, stopping on an EOS id, max_tokens,
// the context length, or when the caller's callback says so (stop strings, a cancelled client).
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "models/model.h"
#include "runtime/kv_cache.h"
#include "runtime/sampler.h"
#include "runtime/scheduler.h"
#include "runtime/step.h"

namespace mlxcel::runtime {

struct GenerationConfig {
  SamplingParams sampling;
  std::int64_t max_tokens = 256;
  std::vector<std::int32_t> eos_ids;
  bool ignore_eos = false;
  std::int64_t prefill_chunk = 512;
  int top_logprobs = 0;
};

struct GenerationResult {
  std::vector<std::int32_t> tokens;
  std::string finish_reason;  // "stop" (EOS or caller), "length" (max_tokens or context)
  std::int64_t prompt_tokens = 0;
  std::int64_t cached_prompt_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Called for each generated token (EOS included, flagged); return false to stop.
using TokenCallback = std::function<bool(const SampleResult& r, bool is_eos)>;

// Throws bad_input if the prompt is empty or does not fit the model's context.
GenerationResult generate(models::Model& model, KvBlockPool& pool,
                          std::span<const std::int32_t> prompt, const GenerationConfig& cfg,
                          const TokenCallback& on_token, bool reuse_prefix = true);

// Blocks a pool needs to hold `tokens` tokens for each of `sequences` sequences.
std::int64_t blocks_for(std::int64_t tokens, int block_size, int sequences = 1);

}  // namespace mlxcel::runtime
