#include "runtime/loader.h"

#include "backend/gpu/runtime.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace mlxcel::runtime {

LoadedModel load_model(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir))
    throw_error(ErrorCategory::kBadInput,
                "model folder '" + dir + "' does not exist (give a local MLX model folder)");
  LoadedModel lm;
  lm.dir = dir;
  models::ModelConfig cfg = models::load_model_config(dir);
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
  BackendKind kind = options.backend;
  const bool default_gpu = !options.device_given && options.numerics == backend::Numerics::kFast &&
                           gpu::compiled_backend() != BackendKind::kCpu && [] {
                             const auto devs = gpu::list_devices();
                             return !devs.empty() && devs[0].supported;
                           }();
  if (default_gpu) kind = gpu::compiled_backend();
  try {
    lm.backend = backend::create_backend(kind, options.numerics);
    lm.weights = std::make_unique<models::CheckpointWeights>(dir, kind);
    lm.model = models::build_model(cfg, *lm.weights, *lm.backend);
    // Every op the model needs, checked now: a refusal lists them all, and nothing can fail
    // for want of a kernel in the middle of a step.
    if (const auto missing = lm.model->missing_ops(); !missing.empty()) {
      std::string list;
      for (const auto& m : missing) list += (list.empty() ? "" : "; ") + m;
      throw_error(ErrorCategory::kUnsupported, "the " + lm.backend->name() +
                                                   " backend has no kernel for " +
                                                   std::to_string(missing.size()) + " op(s) this model needs: " +
                                                   list + "; run it with --device cpu");
    }
  } catch (const Error& e) {
    if (!default_gpu || e.category() != ErrorCategory::kUnsupported) throw;
    // The GPU was our choice, not the user's: say why and load on the CPU (at load time, never
    // mid-step). An explicit --device gpu is refused instead.
    LOG_WARN("the GPU cannot run this model (" << e.what() << "); running on the CPU");
    lm.model.reset();
    lm.weights.reset();
    lm.backend = backend::create_backend(BackendKind::kCpu, options.numerics);
    lm.weights = std::make_unique<models::CheckpointWeights>(dir, BackendKind::kCpu);
    lm.model = models::build_model(cfg, *lm.weights, *lm.backend);
  }
  LOG_INFO("loaded " << cfg.model_type << " from " << dir << ": "
                     << (lm.model->weight_bytes() >> 20) << " MiB of weights on "
                     << lm.backend->name());
  return lm;
}

}  // namespace mlxcel::runtime
