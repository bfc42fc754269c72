#pragma once
// Token sampling with mlx-lm's semantics (mlx_lm/sample_utils.py): logits processors first
// (logit bias, repetition, presence, frequency penalties over the last N tokens), then
// log-softmax, then the filters top-p, min-p, top-k on the log-probabilities, then a categorical
// draw at the temperature. temperature == 0 is greedy (argmax; ties -> lowest id).
// The uniform behind each draw is Philox4x32-10 (core/philox.h) keyed by the seed, with the
// stream id and the token's position as counter: it depends only on (seed, stream, position),
// not on what was drawn before, so any device that runs the same arithmetic draws the same token,
// and a seed reproduces a run exactly. They are not the same random numbers as MLX's.
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

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

class Sampler {
 public:
  // `stream` tells apart sequences that share a seed (for example several choices of one request).
  explicit Sampler(SamplingParams params, std::uint64_t default_seed = 0, std::uint64_t stream = 0);

  // `logits` is modified in place (processors applied). `history` is prompt + generated ids.
  // The draw's counter is `position`, by default history.size() (the position of the token being
  // sampled), so the CLI and the server draw the same tokens for the same prompt and seed.
  SampleResult sample(std::span<float> logits, std::span<const std::int32_t> history, int n_top = 0,
                      std::int64_t position = -1);

  // The distribution a non-greedy draw samples from, before the temperature: processors,
  // log-softmax, then top-p, min-p and top-k, with -inf for removed tokens (mlx-lm's logprobs as
  // they reach categorical_sampling). `logits` is modified in place as in sample().
  std::span<const float> processed_logprobs(std::span<float> logits,
                                            std::span<const std::int32_t> history);

  const SamplingParams& params() const { return params_; }

 private:
  void log_softmax(std::span<float> logits, std::span<const std::int32_t> history);  // -> work_
  void filter();  // work_ -> filtered_

  SamplingParams params_;
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::vector<float> work_;      // log-probabilities after the processors
  std::vector<float> filtered_;  // work_ after the filters
  std::vector<std::int32_t> order_;
};

}  // namespace mlxcel::runtime
