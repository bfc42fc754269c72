#pragma once
// Token sampling with mlx-lm's semantics (mlx_lm/sample_utils.py): logits processors first
// (logit bias, repetition, presence, frequency penalties over the last N tokens), then
// log-softmax, then the filters top-p, min-p, top-k on the log-probabilities, then a categorical
// draw at the temperature. temperature == 0 is greedy (argmax; ties -> lowest id).
// Draws come from our own seeded generator, so a seed reproduces a run exactly; they are not
// the same random numbers as MLX's.
#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace mlxcel::runtime {

struct SamplingParams {
  float temperature = 0.0f;
  float top_p = 1.0f;           // (0, 1]; 1 disables
  int top_k = 0;                // 0 disables
  float min_p = 0.0f;           // [0, 1]; 0 disables
  int min_tokens_to_keep = 1;   // for min-p
  float repetition_penalty = 1.0f;  // 1 disables; sign-aware multiplicative (CTRL paper)
  int repetition_context = 20;
  float presence_penalty = 0.0f;    // subtracted once per distinct recent token
  int presence_context = 20;
  float frequency_penalty = 0.0f;   // subtracted per occurrence of a recent token
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
  float logprob = 0.0f;                // of `token` under the processed distribution
  std::vector<TokenLogprob> top;       // the `n_top` most likely tokens, if asked
};

class Sampler {
 public:
  explicit Sampler(SamplingParams params, std::uint64_t default_seed = 0);

  // `logits` is modified in place (processors applied). `history` is prompt + generated ids.
  SampleResult sample(std::span<float> logits, std::span<const std::int32_t> history,
                      int n_top = 0);

  const SamplingParams& params() const { return params_; }

 private:
  double next_uniform();  // [0, 1)

  SamplingParams params_;
  std::uint64_t state_[4];  // xoshiro256** state
  std::vector<float> work_;
  std::vector<std::int32_t> order_;
};

}  // namespace mlxcel::runtime
