#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

#include "core/error.h"

namespace mlxcel::runtime {
namespace {


std::span<const std::int32_t> tail(std::span<const std::int32_t> h, int n) {
  if (n <= 0) return {};
  std::size_t k = std::min<std::size_t>(h.size(), static_cast<std::size_t>(n));
  return h.subspan(h.size() - k);
}

void bad(const std::string& msg) { throw_error(ErrorCategory::kBadInput, msg); }

}  // namespace

void SamplingParams::validate(std::int64_t vocab_size) const {
  if (!std::isfinite(temperature) || temperature < 0.0f)
    bad("temperature must be a finite number >= 0, got " + std::to_string(temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (top_k < 0) bad("top_k must be >= 0 (0 disables it), got " + std::to_string(top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (min_tokens_to_keep < 1) bad("min_tokens_to_keep must be >= 1");
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
    bad("repetition_penalty must be > 0 (1 disables it), got " +
        std::to_string(repetition_penalty));
  if (!std::isfinite(presence_penalty) || std::fabs(presence_penalty) > 100.0f)
    bad("presence_penalty must be in [-100, 100], got " + std::to_string(presence_penalty));
  if (!std::isfinite(frequency_penalty) || std::fabs(frequency_penalty) > 100.0f)
    bad("frequency_penalty must be in [-100, 100], got " + std::to_string(frequency_penalty));
  if (repetition_context < 0 || presence_context < 0 || frequency_context < 0)
    bad("penalty context sizes must be >= 0");
  for (const auto& [id, b] : logit_bias) {
    if (id < 0 || id >= vocab_size)
      bad("logit_bias token id " + std::to_string(id) + " is outside the vocabulary (0.." +
          std::to_string(vocab_size - 1) + ")");
    if (!std::isfinite(b) || std::fabs(b) > 100.0f) bad("logit_bias values must be in [-100, 100]");
  }
}

Sampler::Sampler(SamplingParams params, std::uint64_t default_seed, std::uint64_t stream)
    : params_(std::move(params)), seed_(params_.seed.value_or(default_seed)), stream_(stream) {}

backend::SampleRow Sampler::row(std::span<const std::int32_t> history, std::int64_t position,
                                int n_top, std::vector<backend::SampleProc>& procs) const {
  using backend::SampleProcKind;
  const SamplingParams& p = params_;
  backend::SampleRow r;
  r.temperature = p.temperature;
  r.inv_temperature = p.temperature > 0.0f ? 1.0f / p.temperature : 1.0f;
  r.top_p = p.top_p;
  r.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : -std::numeric_limits<float>::infinity();
  r.top_k = p.top_k;
  r.min_keep = p.min_tokens_to_keep;
  r.n_top = std::min(std::max(0, n_top), backend::kSampleMaxTop);
  r.seed = seed_;
  r.stream = stream_;
  r.position = static_cast<std::uint64_t>(position);
  // Logit processors in mlx-lm's order; the op applies them in array order.
  r.proc_begin = static_cast<std::int32_t>(procs.size());
  for (const auto& [id, b] : p.logit_bias) procs.push_back({id, SampleProcKind::kBias, b});
  auto distinct = [&](int ctx) {
    std::vector<std::int32_t> seen(tail(history, ctx).begin(), tail(history, ctx).end());
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    return seen;
  };
  if (p.repetition_penalty != 1.0f)
    for (std::int32_t t : distinct(p.repetition_context))
      procs.push_back({t, SampleProcKind::kRepetition, p.repetition_penalty});
  if (p.presence_penalty != 0.0f)
    for (std::int32_t t : distinct(p.presence_context))
      procs.push_back({t, SampleProcKind::kSubtract, p.presence_penalty});
  if (p.frequency_penalty != 0.0f)
    for (std::int32_t t : tail(history, p.frequency_context))
      procs.push_back({t, SampleProcKind::kSubtract, p.frequency_penalty});
  r.proc_end = static_cast<std::int32_t>(procs.size());
  return r;
}

SampleResult to_result(const backend::SampleOut& o) {
  SampleResult r;
  r.token = o.token;
  r.logprob = o.logprob;
  for (int i = 0; i < o.n_top; ++i) r.top.push_back({o.top_ids[i], o.top_logprobs[i]});
  return r;
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history,
                             int n_top, std::int64_t position) const {
  MLXCEL_CHECK(!logits.empty(), ErrorCategory::kInternal, "sample: empty logits");
  if (position < 0) position = static_cast<std::int64_t>(history.size());
  std::vector<backend::SampleProc> procs;
  const backend::SampleRow r = row(history, position, n_top, procs);
  backend::SampleOut o;
  backend::sample_on_host(logits.data(), static_cast<std::int64_t>(logits.size()), r, procs.data(),
                          nullptr, &o);
  MLXCEL_CHECK(o.status == backend::SampleStatus::kOk, ErrorCategory::kInternal,
               "sample: no finite logit (the model produced NaN/inf or every token is masked)");
  return to_result(o);
}

std::vector<float> Sampler::processed_logprobs(std::span<const float> logits,
                                               std::span<const std::int32_t> history) const {
  std::vector<backend::SampleProc> procs;
  backend::SampleRow r = row(history, static_cast<std::int64_t>(history.size()), 0, procs);
  std::vector<float> out(logits.size());
  backend::SampleOut o;
  backend::sample_on_host(logits.data(), static_cast<std::int64_t>(logits.size()), r, procs.data(),
                          nullptr, &o, out.data());
  MLXCEL_CHECK(o.status == backend::SampleStatus::kOk, ErrorCategory::kInternal,
               "sample: no finite logit (the model produced NaN/inf or every token is masked)");
  return out;
}

}  // namespace mlxcel::runtime
