#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "platform/memory_plan.h"

namespace mlxcel::platform {

ModelShape read_model_shape(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::error_code ec;
  std::ifstream f;
  if (std::filesystem::is_regular_file(path, ec)) f.open(path);  // never block on a FIFO
  if (!f.is_open())
    throw_error(ErrorCategory::kBadInput,
                path +
                    ": cannot open (MODEL must be an MLX model folder, OWNER/NAME or a name "
                    "`mlxcel pull` can fetch)");
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object()) throw_error(ErrorCategory::kBadInput, path + ": not a JSON object");
  if (j.contains("text_config") && j["text_config"].is_object()) {
    nlohmann::json t = j["text_config"];
    for (const auto& [k, v] : j.items())
      if (!t.contains(k)) t[k] = v;
    j = t;
  }
  ModelShape s;
  s.model_type = j.value("model_type", "");
  const bool gemma = s.model_type.rfind("gemma3", 0) == 0;
  auto num = [&](const char* k, std::int64_t def) -> std::int64_t {
    return j.contains(k) && j[k].is_number_integer() ? j[k].get<std::int64_t>() : def;
  };
  s.hidden_size = num("hidden_size", gemma ? 1152 : 0);
  s.n_layers = num("num_hidden_layers", gemma ? 26 : 0);
  s.n_heads = num("num_attention_heads", gemma ? 4 : 0);
  if (s.hidden_size <= 0 || s.n_layers <= 0 || s.n_heads <= 0)
    throw_error(ErrorCategory::kBadInput,
                path +
                    ": hidden_size, num_hidden_layers and num_attention_heads are required to "
                    "plan memory");
  s.n_kv_heads = num("num_key_value_heads", gemma ? 1 : s.n_heads);
  s.head_dim = s.model_type == "phi3" ? s.hidden_size / s.n_heads
                                      : num("head_dim", gemma ? 256 : s.hidden_size / s.n_heads);
  s.vocab_size = num("vocab_size", gemma ? 262144 : 0);
  s.intermediate_size = num("intermediate_size", gemma ? 6912 : 0);
  s.moe_intermediate_size = num("moe_intermediate_size", 0);
  s.experts_per_tok = num("num_experts_per_tok", 0);
  s.n_experts = num("num_experts", 0);
  s.context_length = num("max_position_embeddings", 0);
  s.layer_window.assign(static_cast<std::size_t>(s.n_layers), 0);
  if (gemma) {
    const std::int64_t win = num("sliding_window", 512),
                       pat = std::max<std::int64_t>(1, num("sliding_window_pattern", 6));
    for (std::int64_t l = 0; l < s.n_layers; ++l)
      if ((l + 1) % pat != 0) s.layer_window[static_cast<std::size_t>(l)] = win;
  } else if (j.contains("layer_types") && j["layer_types"].is_array() &&
             static_cast<std::int64_t>(j["layer_types"].size()) == s.n_layers) {
    const std::int64_t win = num("sliding_window", 0);
    for (std::size_t i = 0; i < j["layer_types"].size(); ++i)
      if (j["layer_types"][i] == "sliding_attention") s.layer_window[i] = win;
  }
  return s;
}

}  // namespace mlxcel::platform
