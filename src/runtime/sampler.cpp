#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/philox.h"

namespace mlxcel::runtime {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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

void Sampler::log_softmax(std::span<float> logits, std::span<const std::int32_t> history) {
  const std::int64_t n = static_cast<std::int64_t>(logits.size());
  MLXCEL_CHECK(n > 0, ErrorCategory::kInternal, "sample: empty logits");
  const SamplingParams& p = params_;

  // 1. Logits processors, in mlx-lm's order.
  for (const auto& [id, b] : p.logit_bias) logits[id] += b;
  auto valid = [n](std::int32_t t) { return t >= 0 && t < n; };
  if (p.repetition_penalty != 1.0f) {
    std::vector<std::int32_t> seen;
    for (std::int32_t t : tail(history, p.repetition_context))
      if (valid(t)) seen.push_back(t);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (std::int32_t t : seen) {
      float& l = logits[t];
      l = l < 0 ? l * p.repetition_penalty : l / p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f) {
    std::vector<std::int32_t> seen;
    for (std::int32_t t : tail(history, p.presence_context))
      if (valid(t)) seen.push_back(t);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (std::int32_t t : seen) logits[t] -= p.presence_penalty;
  }
  if (p.frequency_penalty != 0.0f) {
    for (std::int32_t t : tail(history, p.frequency_context))
      if (valid(t)) logits[t] -= p.frequency_penalty;
  }

  // 2. Log-softmax (in double for the normalizer: vocabularies reach 256k entries).
  float mx = kNegInf;
  for (float l : logits) mx = std::max(mx, l);
  MLXCEL_CHECK(std::isfinite(mx), ErrorCategory::kInternal,
               "sample: no finite logit (the model produced NaN/inf or every token is masked)");
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l - mx));
  const float lse = mx + static_cast<float>(std::log(z));
  work_.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) work_[i] = logits[i] - lse;
}

void Sampler::filter() {
  const SamplingParams& p = params_;
  const std::int64_t n = static_cast<std::int64_t>(work_.size());
  filtered_.assign(work_.begin(), work_.end());
  std::vector<float>& lp = filtered_;
  // 3. Filters on log-probabilities (a filtered copy; a result's logprob stays unfiltered).
  if (p.top_p > 0.0f && p.top_p < 1.0f) {
    // Keep the smallest set of most likely tokens whose mass reaches top_p (mlx-lm apply_top_p:
    // drop a token when the mass strictly above it is already >= top_p).
    std::vector<float> sorted(lp);
    std::sort(sorted.begin(), sorted.end());
    double total = 0;
    for (float v : sorted) total += std::exp(static_cast<double>(v));
    double above = 0;
    float threshold = sorted.back();
    for (std::int64_t i = n - 1; i >= 0; --i) {
      if (above >= p.top_p * total) break;
      threshold = sorted[i];
      above += std::exp(static_cast<double>(sorted[i]));
    }
    for (float& v : lp)
      if (v < threshold) v = kNegInf;
  }
  if (p.min_p > 0.0f) {
    float top = kNegInf;
    for (float v : lp) top = std::max(top, v);
    const float cut = top + std::log(p.min_p);
    std::vector<std::int32_t> keep;
    if (p.min_tokens_to_keep > 1) {
      keep.resize(static_cast<std::size_t>(n));
      std::iota(keep.begin(), keep.end(), 0);
      int k = static_cast<int>(std::min<std::int64_t>(p.min_tokens_to_keep, n));
      std::partial_sort(keep.begin(), keep.begin() + k, keep.end(),
                        [&](std::int32_t a, std::int32_t b) { return lp[a] > lp[b]; });
      keep.resize(static_cast<std::size_t>(k));
    }
    std::vector<float> saved;
    for (std::int32_t t : keep) saved.push_back(lp[t]);
    for (float& v : lp)
      if (v < cut) v = kNegInf;
    for (std::size_t i = 0; i < keep.size(); ++i) lp[keep[i]] = saved[i];
  }
  if (p.top_k > 0 && p.top_k < n) {
    std::vector<float> sorted(lp);
    std::nth_element(sorted.begin(), sorted.begin() + (p.top_k - 1), sorted.end(),
                     std::greater<float>());
    const float kth = sorted[p.top_k - 1];
    // Keep exactly top_k entries: those above the k-th value, then ties in id order.
    std::int64_t above = 0;
    for (float v : lp)
      if (v > kth) ++above;
    std::int64_t ties_left = p.top_k - above;
    for (float& v : lp) {
      if (v > kth) continue;
      if (v == kth && ties_left > 0) {
        --ties_left;
        continue;
      }
      v = kNegInf;
    }
  }
}

std::span<const float> Sampler::processed_logprobs(std::span<float> logits,
                                                   std::span<const std::int32_t> history) {
  log_softmax(logits, history);
  filter();
  return filtered_;
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const std::int32_t> history,
                             int n_top, std::int64_t position) {
  log_softmax(logits, history);
  const std::int64_t n = static_cast<std::int64_t>(work_.size());
  const SamplingParams& p = params_;

  SampleResult r;
  if (n_top > 0) {
    int k = static_cast<int>(std::min<std::int64_t>(n_top, n));
    order_.resize(static_cast<std::size_t>(n));
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                      [&](std::int32_t a, std::int32_t b) {
                        return work_[a] > work_[b] || (work_[a] == work_[b] && a < b);
                      });
    for (int i = 0; i < k; ++i) r.top.push_back({order_[i], work_[order_[i]]});
  }

  if (p.greedy()) {
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < n; ++i)
      if (work_[i] > work_[best]) best = i;
    r.token = static_cast<std::int32_t>(best);
    r.logprob = work_[best];
    return r;
  }

  filter();
  const std::vector<float>& lp = filtered_;
  if (position < 0) position = static_cast<std::int64_t>(history.size());
  // 4. Categorical draw at temperature: inverse CDF over exp(lp / T).
  const double inv_t = 1.0 / p.temperature;
  float best = kNegInf;
  for (float v : lp) best = std::max(best, v);
  double total = 0;
  for (float v : lp)
    if (v != kNegInf) total += std::exp((static_cast<double>(v) - best) * inv_t);
  double u = philox_uniform(seed_, stream_, static_cast<std::uint64_t>(position)) * total;
  std::int64_t chosen = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    if (lp[i] == kNegInf) continue;
    chosen = i;
    u -= std::exp((static_cast<double>(lp[i]) - best) * inv_t);
    if (u < 0) break;
  }
  r.token = static_cast<std::int32_t>(chosen);
  r.logprob = work_[chosen];
  return r;
}

}  // namespace mlxcel::runtime
