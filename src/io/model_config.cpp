#include "io/model_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/log.h"

namespace mlxcel {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void bad(const std::string& name, const std::string& msg) {
  throw_error(ErrorCategory::kBadInput, name + ": " + msg);
}

int get_int(const json& o, const char* key, int dflt, const std::string& name, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return dflt;
  if (!it->is_number_integer()) bad(name, where + "." + key + " must be an integer");
  const std::int64_t v = it->get<std::int64_t>();
  if (v <= 0 || v > 1024) bad(name, where + "." + key + " = " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

QuantMode get_mode(const json& o, const std::string& name, const std::string& where) {
  auto it = o.find("mode");
  if (it == o.end() || it->is_null()) return QuantMode::kAffine;
  QuantMode m;
  if (!it->is_string() || !parse_quant_mode(it->get<std::string>(), &m)) {
    throw_error(ErrorCategory::kUnsupported, name + ": " + where + ".mode " + it->dump() +
                                                 " is not an MLX quantization mode (affine, mxfp4, mxfp8, nvfp4)");
  }
  return m;
}

QuantParams params_from_dict(const json& o, const std::string& name, const std::string& where) {
  const QuantMode m = get_mode(o, name, where);
  QuantParams p = with_defaults(m, get_int(o, "bits", 0, name, where), get_int(o, "group_size", 0, name, where));
  check_params(p, name + ": " + where);
  return p;
}

void parse_mlx_section(const json& q, const std::string& name, const std::string& key, QuantConfig* out) {
  if (!q.is_object()) bad(name, key + " must be an object");
  out->present = true;
  out->source = key;
  out->defaults = params_from_dict(q, name, key);
  for (auto it = q.begin(); it != q.end(); ++it) {
    const std::string& k = it.key();
    if (k == "group_size" || k == "bits" || k == "mode") continue;
    const json& v = it.value();
    if (v.is_object()) {
      out->overrides[k] = params_from_dict(v, name, key + "[\"" + k + "\"]");
    } else if (v.is_boolean()) {
      // false: written by mlx_lm's awq for modules left unquantized. true: the top level.
      out->overrides[k] = v.get<bool>() ? std::optional<QuantParams>(out->defaults) : std::nullopt;
    }
    // Other scalar keys (e.g. "quant_method" copied by tools) carry no module meaning.
  }
}

void parse_foreign(const json& qc, const std::string& name, QuantConfig* out) {
  if (!qc.is_object()) bad(name, "quantization_config must be an object");
  auto qm = qc.find("quant_method");
  if (qm == qc.end() || !qm->is_string()) {
    // mlx-lm writes an identical copy of `quantization` here; accept it as such.
    if (qc.contains("bits") || qc.contains("group_size")) {
      parse_mlx_section(qc, name, "quantization_config", out);
      return;
    }
    bad(name, "quantization_config has no quant_method");
  }
  const std::string method = qm->get<std::string>();
  auto mapped = [&](QuantParams p) {
    out->present = true;
    out->foreign = ForeignQuant::kMapped;
    out->defaults = p;
    out->source = "quantization_config (" + method + ")";
  };
  if (method == "mxfp4") return mapped(default_params(QuantMode::kMxfp4));
  if (method == "mxfp8") return mapped(default_params(QuantMode::kMxfp8));
  if (method == "fp8") {
    std::vector<int> block{128, 128};
    if (auto b = qc.find("weight_block_size"); b != qc.end() && !b->is_null()) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer()) {
        bad(name, "quantization_config.weight_block_size must be [rows, cols]");
      }
      // Checked as int64: get<int>() would wrap a large value into range.
      const std::int64_t r = (*b)[0].get<std::int64_t>(), c = (*b)[1].get<std::int64_t>();
      if (r <= 0 || c <= 0 || r > 65536 || c > 65536) {
        bad(name, "quantization_config.weight_block_size is out of range");
      }
      block = {static_cast<int>(r), static_cast<int>(c)};
    }
    if (qc.value("scale_fmt", "") == "ue8m0" && block == std::vector<int>{32, 32}) {
      return mapped(default_params(QuantMode::kMxfp8));
    }
    out->present = true;
    out->foreign = ForeignQuant::kFp8Block;
    out->fp8_block = {block[0], block[1]};
    out->source = "quantization_config (fp8 " + std::to_string(block[0]) + "x" + std::to_string(block[1]) + " blocks)";
    out->defaults = default_params(QuantMode::kMxfp8);
    if (auto m = qc.find("modules_to_not_convert"); m != qc.end() && m->is_array()) {
      for (const auto& s : *m)
        if (s.is_string()) out->modules_to_not_convert.push_back(s.get<std::string>());
    }
    return;
  }
  if (method == "compressed-tensors") {
    const std::string fmt = qc.value("format", "");
    if (fmt == "nvfp4-pack-quantized") return mapped(default_params(QuantMode::kNvfp4));
    if (fmt == "mxfp4-pack-quantized") return mapped(default_params(QuantMode::kMxfp4));
    if (fmt == "pack-quantized") return mapped({QuantMode::kAffine, 4, 32});
    throw_error(ErrorCategory::kUnsupported,
                name + ": compressed-tensors format \"" + fmt +
                    "\" is not supported (only nvfp4-pack-quantized, mxfp4-pack-quantized, pack-quantized); "
                    "dequantize to bf16 and convert with mlx_lm.convert");
  }
  if (method == "modelopt") {
    const json& s = qc.contains("quantization") ? qc["quantization"] : qc;
    const std::string algo = s.value("quant_algo", "");
    if (algo != "NVFP4") {
      throw_error(ErrorCategory::kUnsupported, name + ": modelopt quant_algo \"" + algo +
                                                   "\" is not supported (only NVFP4)");
    }
    QuantParams p = default_params(QuantMode::kNvfp4);
    p.group_size = get_int(s, "group_size", 16, name, "quantization_config");
    check_params(p, name + ": modelopt");
    return mapped(p);
  }
  if (method == "awq" || method == "gptq") {
    const int bits = get_int(qc, "bits", 4, name, "quantization_config");
    if (bits != 4) {
      throw_error(ErrorCategory::kUnsupported, name + ": " + method + " with " + std::to_string(bits) +
                                                   " bits is not supported (only 4, as mlx-lm)");
    }
    QuantParams p{QuantMode::kAffine, 4, get_int(qc, "group_size", 128, name, "quantization_config")};
    check_params(p, name + ": " + method);
    out->present = true;
    out->foreign = ForeignQuant::kAwq;
    out->defaults = p;
    out->source = "quantization_config (" + method + ", repacked to affine)";
    return;
  }
  throw_error(ErrorCategory::kUnsupported,
              name + ": quantization_config.quant_method \"" + method +
                  "\" is not supported; convert the model with mlx_lm.convert (e.g. -q for affine 4-bit)");
}

}  // namespace

ModelConfig ModelConfig::load(const std::string& path) {
  fs::path cfg = path;
  std::string hf;
  if (fs::is_directory(cfg)) {
    const fs::path side = cfg / "hf_quant_config.json";
    if (fs::exists(side)) {
      std::ifstream s(side);
      std::stringstream ss;
      ss << s.rdbuf();
      hf = ss.str();
    }
    cfg /= "config.json";
  }
  std::ifstream in(cfg);
  if (!in) {
    throw_error(ErrorCategory::kBadInput, cfg.string() + ": cannot read config.json; is this a model folder?");
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return parse(ss.str(), cfg.string(), hf);
}

ModelConfig ModelConfig::parse(const std::string& text, const std::string& name, const std::string& hf_quant) {
  ModelConfig c;
  c.name_ = name;
  try {
    c.raw_ = json::parse(text);
  } catch (const json::exception& e) {
    bad(name, std::string("not valid JSON: ") + e.what());
  }
  if (!c.raw_.is_object()) bad(name, "config.json must be a JSON object");
  const json& j = c.raw_;
  if (auto it = j.find("quantization"); it != j.end() && !it->is_null()) {
    parse_mlx_section(*it, name, "quantization", &c.quant_);
  } else {
    const json* qc = nullptr;
    json side;
    if (auto q = j.find("quantization_config"); q != j.end() && !q->is_null()) {
      qc = &*q;
    } else if (auto t = j.find("text_config"); t != j.end() && t->is_object() && t->contains("quantization_config")) {
      qc = &(*t)["quantization_config"];
    } else if (!hf_quant.empty()) {
      try {
        side = json::parse(hf_quant);
      } catch (const json::exception& e) {
        bad(name, std::string("hf_quant_config.json is not valid JSON: ") + e.what());
      }
      qc = &side;
    }
    if (qc != nullptr) parse_foreign(*qc, name, &c.quant_);
  }
  if (auto qa = j.find("quantize_activations"); qa != j.end() && qa->is_boolean()) {
    c.quant_.quantize_activations = qa->get<bool>();
  }
  return c;
}

std::optional<QuantParams> ModelConfig::quant_params_for(const std::string& module_path, bool has_scales) const {
  if (!quant_.present || quant_.foreign == ForeignQuant::kFp8Block) return std::nullopt;
  if (auto it = quant_.overrides.find(module_path); it != quant_.overrides.end()) return it->second;
  if (!has_scales) return std::nullopt;
  return quant_.defaults;
}

}  // namespace mlxcel
