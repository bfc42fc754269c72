#include "models/loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace mlxcel::models {

LoadedModel load_model(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw_error(ErrorCategory::kBadInput,
                "model folder '" + dir + "' does not exist (give a local MLX model folder)");
  LoadedModel lm;
  lm.dir = dir;
  ModelConfig cfg = load_model_config(dir);
  lm.eos_ids = cfg.eos_token_ids;
  std::ifstream g(dir + "/generation_config.json");
  if (g) {
    std::stringstream ss;
    ss << g.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (!j.is_discarded() && j.contains("eos_token_id")) {
      auto add = [&](const nlohmann::json& v) {
        if (v.is_number_integer()) lm.eos_ids.push_back(v.get<std::int32_t>());
      };
      if (j["eos_token_id"].is_array())
        for (const auto& v : j["eos_token_id"]) add(v);
      else
        add(j["eos_token_id"]);
    }
  }
  std::sort(lm.eos_ids.begin(), lm.eos_ids.end());
  lm.eos_ids.erase(std::unique(lm.eos_ids.begin(), lm.eos_ids.end()), lm.eos_ids.end());
  lm.weights = std::make_unique<CheckpointWeights>(dir, options.backend);
  lm.model = build_model(cfg, *lm.weights);
  lm.model->set_numerics(options.numerics);
  LOG_INFO("loaded " << cfg.model_type << " from " << dir << ": "
                     << (lm.model->weight_bytes() >> 20) << " MiB of weights");
  return lm;
}

}  // namespace mlxcel::models
