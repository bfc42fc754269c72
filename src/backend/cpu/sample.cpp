#include "backend/cpu/sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/backend.h"

namespace mlxcel::cpu {

using namespace backend;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Keeps the `k` largest of s (value descending, ties by lowest id) alive in `keep`.
void mark_top(const float* s, std::int64_t n, std::int64_t k, std::vector<std::uint8_t>& keep) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  k = std::min(k, n);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
    return s[a] > s[b] || (s[a] == s[b] && a < b);
  });
  keep.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = 0; i < k; ++i) keep[static_cast<std::size_t>(order[i])] = 1;
}

}  // namespace

void sample_row(const float* logits, std::int64_t n, const SampleRow& p, const SampleProc* procs,
                const std::uint32_t* mask, float* w, SampleOut* out, float* processed) {
  *out = SampleOut{};
  // 1. The row in fp32, its processors (in order) and the allowed-token mask.
  std::copy_n(logits, n, w);
  if (p.debug_nan) w[0] = std::numeric_limits<float>::quiet_NaN();
  for (std::int32_t i = p.proc_begin; i < p.proc_end; ++i) {
    const SampleProc& e = procs[i];
    if (e.token >= 0 && e.token < n) w[e.token] = apply_sample_proc(w[e.token], e.kind, e.value);
  }
  if (mask)
    for (std::int64_t t = 0; t < n; ++t)
      if (!((mask[t >> 5] >> (t & 31)) & 1u)) w[t] = kNegInf;
  float mx = kNegInf;
  std::int64_t best = -1;
  for (std::int64_t t = 0; t < n; ++t) {
    const float v = w[t];
    if (std::isnan(v) || v == INFINITY) {
      out->status = SampleStatus::kNonFinite;
      return;
    }
    if (v > mx) mx = v, best = t;
  }
  if (best < 0) {
    out->status = SampleStatus::kAllMasked;
    return;
  }
  // 2. Log-probabilities (reported only; the normalizer in double, when anything reports it).
  const bool want_lse = p.logprobs || p.n_top > 0 || processed;
  double z = 0;
  if (want_lse)
    for (std::int64_t t = 0; t < n; ++t) z += std::exp(static_cast<double>(w[t] - mx));
  const float lse = mx + static_cast<float>(std::log(z));
  auto logprob = [&](std::int64_t t) { return p.logprobs ? w[t] - lse : 0.0f; };
  if (p.n_top > 0) {
    const std::int64_t k = std::min<std::int64_t>(std::min(p.n_top, kSampleMaxTop), n);
    std::vector<std::int32_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](std::int32_t a, std::int32_t b) {
      return w[a] > w[b] || (w[a] == w[b] && a < b);
    });
    out->n_top = static_cast<std::int32_t>(k);
    for (std::int64_t i = 0; i < k; ++i) {
      out->top_ids[i] = order[static_cast<std::size_t>(i)];
      out->top_logprobs[i] = w[order[static_cast<std::size_t>(i)]] - lse;
    }
  }
  if (p.temperature <= 0.0f && !processed) {
    out->token = static_cast<std::int32_t>(best);
    out->logprob = logprob(best);
    return;
  }

  // 3. Filters on s = logit - max, in mlx-lm's order: top-p, min-p, top-k. Removed: -inf.
  std::vector<float> s(static_cast<std::size_t>(n));
  for (std::int64_t t = 0; t < n; ++t) s[t] = w[t] - mx;
  if (p.top_p > 0.0f && p.top_p < 1.0f) {
    // The nucleus: the largest threshold whose mass of tokens at or above it reaches top_p of the
    // total (integer weights: the same set on every device).
    std::vector<std::int32_t> order(static_cast<std::size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return s[a] > s[b]; });
    std::uint64_t total = 0;
    for (std::int64_t t = 0; t < n; ++t) total += sample_weight(s[t]);
    std::uint64_t above = 0;
    float threshold = s[order.back()];
    for (std::int32_t t : order) {
      above += sample_weight(s[t]);
      if (nucleus_reached(above, total, p.top_p)) {
        threshold = s[t];
        break;
      }
    }
    for (float& v : s)
      if (v < threshold) v = kNegInf;
  }
  if (p.log_min_p > kNegInf) {
    std::vector<std::uint8_t> keep;
    if (p.min_keep > 1) mark_top(s.data(), n, p.min_keep, keep);
    for (std::int64_t t = 0; t < n; ++t)
      if (s[t] < p.log_min_p && (keep.empty() || !keep[t])) s[t] = kNegInf;
  }
  if (p.top_k > 0 && p.top_k < n) {
    std::vector<std::uint8_t> keep;
    mark_top(s.data(), n, p.top_k, keep);
    for (std::int64_t t = 0; t < n; ++t)
      if (!keep[t]) s[t] = kNegInf;
  }
  if (processed)
    for (std::int64_t t = 0; t < n; ++t) processed[t] = s[t] == kNegInf ? kNegInf : w[t] - lse;
  if (p.temperature <= 0.0f) {
    out->token = static_cast<std::int32_t>(best);
    out->logprob = logprob(best);
    return;
  }

  // 4. The categorical draw at the temperature over integer weights, in id order.
  std::uint64_t total = 0;
  for (std::int64_t t = 0; t < n; ++t)
    if (s[t] != kNegInf) total += sample_weight(s[t] * p.inv_temperature);
  const std::uint64_t target = draw_target(p.seed, p.stream, p.position, total);
  std::uint64_t acc = 0;
  std::int64_t chosen = best;
  for (std::int64_t t = 0; t < n; ++t) {
    if (s[t] == kNegInf) continue;
    acc += sample_weight(s[t] * p.inv_temperature);
    if (acc > target) {
      chosen = t;
      break;
    }
  }
  out->token = static_cast<std::int32_t>(chosen);
  out->logprob = logprob(chosen);
}

}  // namespace mlxcel::cpu

namespace mlxcel::backend {

void sample_on_host(const float* logits, std::int64_t vocab, const SampleRow& row,
                    const SampleProc* procs, const std::uint32_t* mask, SampleOut* out,
                    float* processed) {
  std::vector<float> work(static_cast<std::size_t>(vocab));
  cpu::sample_row(logits, vocab, row, procs, mask, work.data(), out, processed);
}

}  // namespace mlxcel::backend
