#include "models/model_config.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace mlxcel::models {
namespace {

using json = nlohmann::json;

struct Reader {
  const json& j;
  const std::string& src;

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    throw_error(ErrorCategory::kBadInput, src + ": '" + key + "' " + what);
  }
  bool has(const char* k) const { return j.contains(k) && !j[k].is_null(); }
  std::int64_t integer(const char* k, std::optional<std::int64_t> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      bad(k, "is missing");
    }
    if (!j[k].is_number_integer()) bad(k, "must be an integer, got " + j[k].dump());
    return j[k].get<std::int64_t>();
  }
  double number(const char* k, std::optional<double> def = std::nullopt) const {
    if (!has(k)) {
      if (def) return *def;
      bad(k, "is missing");
    }
    if (!j[k].is_number()) bad(k, "must be a number, got " + j[k].dump());
    return j[k].get<double>();
  }
  bool boolean(const char* k, bool def) const {
    if (!has(k)) return def;
    if (!j[k].is_boolean()) bad(k, "must be true or false, got " + j[k].dump());
    return j[k].get<bool>();
  }
  std::int64_t positive(const char* k, std::optional<std::int64_t> def = std::nullopt) const {
    std::int64_t v = integer(k, def);
    if (v <= 0) bad(k, "must be positive, got " + std::to_string(v));
    return v;
  }
};

RopeScaling parse_rope_scaling(const json& j, const std::string& src) {
  RopeScaling r;
  if (j.is_null()) return r;
  if (!j.is_object()) throw_error(ErrorCategory::kBadInput, src + ": 'rope_scaling' must be an object");
  Reader rd{j, src};
  if (j.contains("rope_type") && j["rope_type"].is_string()) r.type = j["rope_type"];
  else if (j.contains("type") && j["type"].is_string()) r.type = j["type"];
  r.factor = rd.number("factor", 1.0);
  r.low_freq_factor = rd.number("low_freq_factor", 1.0);
  r.high_freq_factor = rd.number("high_freq_factor", 4.0);
  r.original_max_position_embeddings = rd.integer("original_max_position_embeddings", 0);
  auto list = [&](const char* k, std::vector<double>& out) {
    if (!j.contains(k) || j[k].is_null()) return;
    if (!j[k].is_array()) rd.bad(k, "must be a list of numbers");
    for (const auto& x : j[k]) {
      if (!x.is_number()) rd.bad(k, "must be a list of numbers");
      out.push_back(x.get<double>());
    }
  };
  list("short_factor", r.short_factor);
  list("long_factor", r.long_factor);
  r.beta_fast = rd.number("beta_fast", 32.0);
  r.beta_slow = rd.number("beta_slow", 1.0);
  r.mscale = rd.number("mscale", 1.0);
  r.mscale_all_dim = rd.number("mscale_all_dim", 0.0);
  if (rd.has("attention_factor")) r.attention_factor = rd.number("attention_factor");
  static const char* kKnown[] = {"", "default", "linear", "llama3", "yarn", "longrope", "su"};
  bool known = false;
  for (const char* k : kKnown) known = known || r.type == k;
  if (!known)
    throw_error(ErrorCategory::kUnsupported,
                src + ": rope_scaling type '" + r.type +
                    "' is not supported (supported: linear, llama3, yarn, longrope, su)");
  return r;
}

std::vector<std::int32_t> parse_ids(const json& v) {
  std::vector<std::int32_t> out;
  if (v.is_number_integer()) out.push_back(v.get<std::int32_t>());
  if (v.is_array())
    for (const auto& x : v)
      if (x.is_number_integer()) out.push_back(x.get<std::int32_t>());
  return out;
}

}  // namespace

const char* family_name(Family f) {
  switch (f) {
    case Family::kLlama: return "llama";
    case Family::kQwen2: return "qwen2";
    case Family::kQwen3: return "qwen3";
    case Family::kQwen3Moe: return "qwen3_moe";
    case Family::kGemma3Text: return "gemma3_text";
    case Family::kPhi3: return "phi3";
  }
  return "?";
}

std::string supported_model_types() {
  return "llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, phi3";
}

bool ModelConfig::layer_is_moe(std::int64_t layer) const {
  if (family != Family::kQwen3Moe || num_experts <= 0) return false;
  for (auto l : mlp_only_layers)
    if (l == layer) return false;
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

ModelConfig parse_model_config(const json& j, const std::string& src) {
  if (!j.is_object()) throw_error(ErrorCategory::kBadInput, src + ": must be a JSON object");
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw_error(ErrorCategory::kBadInput, src + ": 'model_type' is missing");
  ModelConfig c;
  c.raw = j;
  c.model_type = j["model_type"];
  const std::string& t = c.model_type;
  if (t == "llama" || t == "mistral") c.family = Family::kLlama;
  else if (t == "qwen2") c.family = Family::kQwen2;
  else if (t == "qwen3") c.family = Family::kQwen3;
  else if (t == "qwen3_moe") c.family = Family::kQwen3Moe;
  else if (t == "gemma3_text") c.family = Family::kGemma3Text;
  else if (t == "phi3") c.family = Family::kPhi3;
  else
    throw_error(ErrorCategory::kUnsupported,
                src + ": model_type '" + t + "' is not supported; supported families: " +
                    supported_model_types());

  Reader r{j, src};
  const bool gemma = c.family == Family::kGemma3Text;
  c.hidden_size = r.positive("hidden_size", gemma ? std::optional<std::int64_t>(1152) : std::nullopt);
  c.num_hidden_layers = r.positive("num_hidden_layers", gemma ? std::optional<std::int64_t>(26) : std::nullopt);
  c.intermediate_size = r.positive("intermediate_size", gemma ? std::optional<std::int64_t>(6912) : std::nullopt);
  c.num_attention_heads = r.positive("num_attention_heads", gemma ? std::optional<std::int64_t>(4) : std::nullopt);
  c.num_key_value_heads = r.positive("num_key_value_heads", gemma ? 1 : c.num_attention_heads);
  c.vocab_size = r.positive("vocab_size", gemma ? std::optional<std::int64_t>(262144) : std::nullopt);
  c.rms_norm_eps = r.number("rms_norm_eps", gemma ? std::optional<double>(1e-6) : std::nullopt);
  c.head_dim = r.positive("head_dim", gemma ? 256 : c.hidden_size / c.num_attention_heads);
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    r.bad("num_key_value_heads", "must divide num_attention_heads (" +
                                     std::to_string(c.num_attention_heads) + ")");

  // rope_theta / rope_scaling, possibly nested in transformers 5's rope_parameters.
  const json* rope_params = (j.contains("rope_parameters") && j["rope_parameters"].is_object())
                                ? &j["rope_parameters"]
                                : nullptr;
  double theta_default = c.family == Family::kQwen2 ? 1000000.0 : gemma ? 1000000.0 : 10000.0;
  if (r.has("rope_theta")) c.rope_theta = r.number("rope_theta");
  else if (rope_params && rope_params->contains("rope_theta")) c.rope_theta = (*rope_params)["rope_theta"].get<double>();
  else if (c.family == Family::kQwen3 || c.family == Family::kQwen3Moe) r.bad("rope_theta", "is missing");
  else c.rope_theta = theta_default;
  c.rope_traditional = r.boolean("rope_traditional", false);
  if (r.has("rope_scaling")) c.rope_scaling = parse_rope_scaling(j["rope_scaling"], src);
  else if (rope_params) c.rope_scaling = parse_rope_scaling(*rope_params, src);

  std::int64_t mpe_default = c.family == Family::kQwen2 ? 32768
                             : gemma                     ? 32768
                             : c.family == Family::kPhi3 ? 131072
                                                         : 0;
  c.max_position_embeddings = r.integer("max_position_embeddings", mpe_default);
  bool tie_default = c.family != Family::kPhi3;
  c.tie_word_embeddings = r.boolean("tie_word_embeddings", tie_default);
  if (gemma) c.tie_word_embeddings = true;  // gemma3 always ties (mlx-lm has no lm_head)
  c.attention_bias = c.family == Family::kQwen2 ? true : r.boolean("attention_bias", false);
  c.mlp_bias = r.boolean("mlp_bias", false);

  c.layer_window.assign(static_cast<std::size_t>(c.num_hidden_layers), 0);
  if (c.family == Family::kLlama) {
    std::int64_t win = r.has("sliding_window") ? r.integer("sliding_window") : 0;
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      const auto& lt = j["layer_types"];
      if (static_cast<std::int64_t>(lt.size()) != c.num_hidden_layers)
        r.bad("layer_types", "must have num_hidden_layers entries");
      for (std::size_t i = 0; i < lt.size(); ++i)
        if (lt[i] == "sliding_attention") c.layer_window[i] = win;
    }
    // Without layer_types mlx-lm's llama (which also runs mistral) ignores sliding_window; so
    // do we, for identical output.
  } else if (gemma) {
    c.rope_local_base_freq = r.number("rope_local_base_freq", 10000.0);
    c.query_pre_attn_scalar = r.number("query_pre_attn_scalar", 256.0);
    std::int64_t win = r.integer("sliding_window", 512);
    c.sliding_window_pattern = r.positive("sliding_window_pattern", 6);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
      if ((l + 1) % c.sliding_window_pattern != 0) c.layer_window[l] = win;
  } else if (c.family == Family::kQwen3Moe) {
    c.num_experts = r.positive("num_experts");
    c.num_experts_per_tok = r.positive("num_experts_per_tok");
    if (c.num_experts_per_tok > c.num_experts) r.bad("num_experts_per_tok", "exceeds num_experts");
    c.moe_intermediate_size = r.positive("moe_intermediate_size");
    c.decoder_sparse_step = r.positive("decoder_sparse_step", 1);
    c.norm_topk_prob = r.boolean("norm_topk_prob", false);
    if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
      for (const auto& x : j["mlp_only_layers"]) c.mlp_only_layers.push_back(x.get<std::int64_t>());
  } else if (c.family == Family::kPhi3) {
    c.head_dim = c.hidden_size / c.num_attention_heads;  // mlx-lm's phi3 ignores head_dim
    c.partial_rotary_factor = r.number("partial_rotary_factor", 1.0);
    c.original_max_position_embeddings = r.integer("original_max_position_embeddings", 4096);
    const auto& rs = c.rope_scaling;
    if (!rs.type.empty() && rs.type != "longrope" && rs.type != "su" && rs.type != "linear")
      c.rope_scaling = RopeScaling{};  // mlx-lm warns and disables other types for phi3
    if ((rs.type == "longrope" || rs.type == "su") &&
        static_cast<std::int64_t>(rs.long_factor.size()) * 2 !=
            static_cast<std::int64_t>(c.head_dim * c.partial_rotary_factor))
      r.bad("rope_scaling", "long_factor must have rotary_dim/2 entries");
  }
  if (j.contains("eos_token_id")) c.eos_token_ids = parse_ids(j["eos_token_id"]);
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer())
    c.bos_token_id = j["bos_token_id"].get<std::int32_t>();
  return c;
}

ModelConfig load_model_config(const std::string& model_dir) {
  std::string path = model_dir + "/config.json";
  std::ifstream f(path);
  if (!f)
    throw_error(ErrorCategory::kBadInput,
                path + ": cannot open (is '" + model_dir + "' an MLX model folder?)");
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw_error(ErrorCategory::kBadInput, path + ": not valid JSON");
  return parse_model_config(j, path);
}

}  // namespace mlxcel::models
