// sampler_driver: runs runtime::Sampler on logits and parameters given as one JSON object on stdin,
// so tests/python/test_sampler_mlx.py can compare it with mlx-lm's sample_utils. Writes one JSON
// object to stdout.
//   in:  {"logits": [float...], "history": [id...], "params": {SamplingParams fields by name,
//         "logit_bias": [[id, value]...], "seed": int}, "stream": int, "n_top": int,
//         "draws": N, "first_position": int, "uniforms": [[seed, stream, position]...]}
//   out: {"processed": [logprob or null for -inf...]   processors, log-softmax and filters
//         "sample": {"token", "logprob", "top": [[id, logprob]...]}   at position history.size()
//         "counts": {id: n}   tokens of N draws at positions first_position ...
//         "uniforms": [double...]}   philox_uniform of each triple
#include <cmath>
#include <cstdint>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/philox.h"
#include "runtime/sampler.h"

using namespace mlxcel;
using nlohmann::json;

namespace {

runtime::SamplingParams params_from(const json& j) {
  runtime::SamplingParams p;
  p.temperature = j.value("temperature", p.temperature);
  p.top_p = j.value("top_p", p.top_p);
  p.top_k = j.value("top_k", p.top_k);
  p.min_p = j.value("min_p", p.min_p);
  p.min_tokens_to_keep = j.value("min_tokens_to_keep", p.min_tokens_to_keep);
  p.repetition_penalty = j.value("repetition_penalty", p.repetition_penalty);
  p.repetition_context = j.value("repetition_context", p.repetition_context);
  p.presence_penalty = j.value("presence_penalty", p.presence_penalty);
  p.presence_context = j.value("presence_context", p.presence_context);
  p.frequency_penalty = j.value("frequency_penalty", p.frequency_penalty);
  p.frequency_context = j.value("frequency_context", p.frequency_context);
  if (j.contains("logit_bias"))
    for (const auto& e : j["logit_bias"])
      p.logit_bias.push_back({e[0].get<std::int32_t>(), e[1].get<float>()});
  if (j.contains("seed")) p.seed = j["seed"].get<std::uint64_t>();
  return p;
}

}  // namespace

int main() {
  try {
    std::stringstream text;
    text << std::cin.rdbuf();
    json in = json::parse(text.str());
    json out = json::object();
    const auto logits = in.value("logits", std::vector<float>{});
    const auto history = in.value("history", std::vector<std::int32_t>{});
    const runtime::SamplingParams p = params_from(in.value("params", json::object()));
    const std::uint64_t stream = in.value("stream", std::uint64_t{0});
    if (!logits.empty()) {
      p.validate(static_cast<std::int64_t>(logits.size()));
      runtime::Sampler s(p, 0, stream);
      auto l = logits;
      json processed = json::array();
      for (float v : s.processed_logprobs(l, history))
        processed.push_back(std::isinf(v) ? json(nullptr) : json(v));
      out["processed"] = processed;

      l = logits;
      runtime::SampleResult r = s.sample(l, history, in.value("n_top", 0));
      json top = json::array();
      for (const auto& t : r.top) top.push_back({t.id, t.logprob});
      out["sample"] = {{"token", r.token}, {"logprob", r.logprob}, {"top", top}};

      const std::int64_t draws = in.value("draws", std::int64_t{0});
      const std::int64_t first = in.value("first_position", std::int64_t{0});
      std::map<std::int32_t, std::int64_t> counts;
      for (std::int64_t i = 0; i < draws; ++i) {
        l = logits;
        counts[s.sample(l, history, 0, first + i).token]++;
      }
      json c = json::object();
      for (const auto& [id, n] : counts) c[std::to_string(id)] = n;
      out["counts"] = c;
    }
    if (in.contains("uniforms")) {
      json u = json::array();
      for (const auto& t : in["uniforms"])
        u.push_back(philox_uniform(t[0].get<std::uint64_t>(), t[1].get<std::uint64_t>(),
                                   t[2].get<std::uint64_t>()));
      out["uniforms"] = u;
    }
    std::cout << out.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "sampler_driver: " << e.what() << "\n";
    return 1;
  }
}
