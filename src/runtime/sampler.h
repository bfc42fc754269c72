#pragma once
// Token sampling with mlx-lm's semantics (mlx_lm/sample_utils.py): logits processors first
// (logit bias, repetition, presence, frequency penalties over the last N tokens), then
// log-softmax, then the filters top-p, min-p, top-k on the log-probabilities, then a categorical
// draw at the temperature. temperature == 0 is greedy (argmax; ties -> lowest id).
// The draw is the sampling op's (backend/sample_math.h): Philox4x32-10 keyed by the seed, with the
// stream id and the token's position as counter, over integer weights, so it depends only on
// (seed, stream, position) and the logits, every device draws the same token, and a seed
// reproduces a run exactly. They are not the same random numbers as MLX's.
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "backend/backend.h"

namespace mlxcel::runtime {

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;               // (0, 1]; 1 disables
  int top_k = 0;                    // 0 disables
  float min_p = 0.0f;               // [0, 1]; 0 disables
  int min_tokens_to_keep = 1;       // for min-p
  float repetition_penalty = 1.0f;  // 1 disables; sign-aware multiplicative (CTRL paper)
  int repetition_context = 20;
  float presence_penalty = 0.0f;  // subtracted once per distinct recent token
  int presence_context = 20;
  float frequency_penalty = 0.0f;  // subtracted per occurrence of a recent token
  int frequency_context = 20;
  std::vector<std::pair<std::int32_t, float>> logit_bias;
  std::optional<std::uint64_t> seed;

  // Throws bad_input naming the field and its allowed range.
  void validate(std::int64_t vocab_size) const;
  bool greedy() const { return temperature <= 0.0f; }
};

struct TokenLogprob {
  std::int32_t id = 0;
  float logprob = 0.0f;
};

struct SampleResult {
  std::int32_t token = 0;
  float logprob = 0.0f;           // of `token` under the processed distribution
  std::vector<TokenLogprob> top;  // the `n_top` most likely tokens, if asked
};

// One sequence's sampling: its parameters become the sampling op's per-row arguments
// (backend/sample_math.h: the same draw on every device). The arithmetic runs in the op; sample()
// and processed_logprobs() run it on host logits (tests, tools).
class Sampler {
 public:
  // `stream` tells apart sequences that share a seed (for example several choices of one request).
  explicit Sampler(SamplingParams params, std::uint64_t default_seed = 0, std::uint64_t stream = 0);

  // The op's row for the token at `position` (the draw's counter; by convention history.size(),
  // so the CLI and the server draw the same tokens for the same prompt and seed), with this
  // sequence's logit processors appended to `procs` (rows index them).
  backend::SampleRow row(std::span<const std::int32_t> history, std::int64_t position, int n_top,
                         std::vector<backend::SampleProc>& procs) const;

  // Host convenience over the op. `logits` is not modified. Throws internal when the logits are
  // not finite or every token is removed. position < 0: history.size().
  SampleResult sample(std::span<const float> logits, std::span<const std::int32_t> history,
                      int n_top = 0, std::int64_t position = -1) const;

  // The distribution a non-greedy draw samples from, before the temperature: processors,
  // log-softmax, then top-p, min-p and top-k, with -inf for removed tokens (mlx-lm's logprobs as
  // they reach categorical_sampling).
  std::vector<float> processed_logprobs(std::span<const float> logits,
                                        std::span<const std::int32_t> history) const;

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::uint64_t seed_;
  std::uint64_t stream_;
};

// The result the op gave for one row (status checked by the caller).
SampleResult to_result(const backend::SampleOut& o);

}  // namespace mlxcel::runtime
