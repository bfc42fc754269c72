#include "tokenizer/chat_template.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/jinja/parser.h"

namespace mlxcel {

namespace fs = std::filesystem;
using jinja::Args;
using jinja::Interpreter;
using jinja::Value;
using ojson = nlohmann::ordered_json;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) throw_error(ErrorCategory::kBadInput, "chat template: cannot open " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string token_str(const ojson& cfg, const char* key) {
  if (!cfg.contains(key)) return {};
  const auto& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v["content"].get<std::string>();
  return {};
}

std::string template_from(const ojson& t) {
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array()) {
    for (const auto& e : t)
      if (e.value("name", "") == "default") return e.value("template", "");
    if (!t.empty()) return t[0].value("template", "");
  }
  return {};
}

// Fills reasoning_content (and thinking) from whichever name the client used, like transformers'
// _alias_reasoning_fields: {"thinking": r, **message, "reasoning_content": r}.
ojson alias_reasoning(const ojson& messages) {
  if (!messages.is_array()) return messages;
  ojson out = ojson::array();
  for (const auto& m : messages) {
    if (!m.is_object()) {
      out.push_back(m);
      continue;
    }
    const ojson* r = nullptr;
    for (const char* k : {"reasoning_content", "thinking", "reasoning"}) {
      if (m.contains(k) && !m[k].is_null()) {
        r = &m[k];
        break;
      }
    }
    if (!r) {
      out.push_back(m);
      continue;
    }
    ojson n = ojson::object();
    n["thinking"] = *r;
    for (auto it = m.begin(); it != m.end(); ++it) n[it.key()] = it.value();
    n["reasoning_content"] = *r;
    out.push_back(std::move(n));
  }
  return out;
}

Value namespace_fn(Interpreter& in, Args& a) {
  auto d = std::make_shared<jinja::Dict>();
  for (const auto& p : a.pos) {
    if (p.kind != jinja::Kind::kDict) in.fail(a.line, "namespace() positional argument must be a dict");
    for (const auto& [k, v] : p.dict->items) d->set(k, v);
  }
  for (const auto& [k, v] : a.kw) {
    if (!k.empty() && k[0] == '_')
      in.fail(a.line, "chat templates cannot store underscore-prefixed attributes on a namespace, but got '" + k + "'");
    d->set(k, v);
  }
  in.adopt_namespace(d);
  return Value::make_namespace(std::move(d));
}

Value dict_fn(Interpreter& in, Args& a) {
  auto d = std::make_shared<jinja::Dict>();
  for (const auto& p : a.pos) {
    if (p.kind == jinja::Kind::kDict) {
      for (const auto& [k, v] : p.dict->items) d->set(k, v);
    } else if (p.is_list()) {
      for (const auto& it : p.list->items) {
        if (!it.is_list() || it.list->items.size() != 2) in.fail(a.line, "dict() needs (key, value) pairs");
        d->set(jinja::to_str(it.list->items[0]), it.list->items[1]);
      }
    } else {
      in.fail(a.line, "'" + jinja::type_name(p) + "' object is not iterable");
    }
  }
  for (const auto& [k, v] : a.kw) d->set(k, v);
  return Value::make_dict(std::move(d));
}

Value range_fn(Interpreter& in, Args& a) {
  auto geti = [&](size_t i) {
    if (a.pos[i].kind != jinja::Kind::kInt && a.pos[i].kind != jinja::Kind::kBool)
      in.fail(a.line, "range() integer argument expected, got " + jinja::type_name(a.pos[i]));
    return a.pos[i].kind == jinja::Kind::kBool ? static_cast<int64_t>(a.pos[i].b) : a.pos[i].i;
  };
  int64_t start = 0, stop = 0, step = 1;
  if (a.pos.size() == 1) stop = geti(0);
  else if (a.pos.size() >= 2) {
    start = geti(0);
    stop = geti(1);
    if (a.pos.size() >= 3) step = geti(2);
  } else {
    in.fail(a.line, "range expected at least 1 argument, got 0");
  }
  if (step == 0) in.fail(a.line, "range() arg 3 must not be zero");
  int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                       : (start > stop ? (start - stop - step - 1) / -step : 0);
  in.check_size(static_cast<size_t>(n), a.line);
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) items.push_back(Value::integer(start + k * step));
  return Value::make_list(std::move(items));
}

Value strftime_fn(Interpreter& in, Args& a) {
  if (a.pos.empty() || !a.pos[0].is_string()) in.fail(a.line, "strftime_now() needs a format string");
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), a.pos[0].s.c_str(), &tm);
  return Value::string(std::string(buf, n));
}

}  // namespace

ChatTemplate ChatTemplate::from_source(const std::string& source, std::string bos_token, std::string eos_token) {
  ChatTemplate t;
  t.source_ = source;
  t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  t.tpl_ = std::make_shared<const jinja::Template>(jinja::parse(source));
  return t;
}

ChatTemplate ChatTemplate::from_model_dir(const std::string& dir) {
  fs::path d(dir);
  ojson cfg = ojson::object();
  if (fs::exists(d / "tokenizer_config.json")) {
    try {
      cfg = ojson::parse(read_file(d / "tokenizer_config.json"));
    } catch (const nlohmann::json::exception& e) {
      throw_error(ErrorCategory::kBadInput, "chat template: " + (d / "tokenizer_config.json").string() +
                                                " is not valid JSON: " + e.what());
    }
  }
  std::string src = cfg.contains("chat_template") ? template_from(cfg["chat_template"]) : "";
  if (src.empty() && fs::exists(d / "chat_template.jinja")) src = read_file(d / "chat_template.jinja");
  if (src.empty() && fs::exists(d / "chat_template.json")) {
    ojson j = ojson::parse(read_file(d / "chat_template.json"));
    if (j.contains("chat_template")) src = template_from(j["chat_template"]);
  }
  if (src.empty())
    throw_error(ErrorCategory::kBadInput, "chat template: " + dir +
                                              " has no chat_template (tokenizer_config.json, chat_template.jinja "
                                              "or chat_template.json); this looks like a base model, use plain "
                                              "completion instead");
  return from_source(src, token_str(cfg, "bos_token"), token_str(cfg, "eos_token"));
}

std::string ChatTemplate::render(const ojson& messages, const ojson& tools, bool add_generation_prompt,
                                 const ojson& extra) const {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("raise_exception", Value::callable("raise_exception", [](Interpreter& in, Args& a) -> Value {
    std::string msg = a.pos.empty() ? "" : jinja::to_str(a.pos[0]);
    throw_error(ErrorCategory::kBadInput, "chat template raised an exception at line " + std::to_string(a.line) +
                                              ": " + msg);
    (void)in;
  }));
  g.emplace_back("strftime_now", Value::callable("strftime_now", strftime_fn));
  g.emplace_back("namespace", Value::callable("namespace", namespace_fn));
  g.emplace_back("dict", Value::callable("dict", dict_fn));
  g.emplace_back("range", Value::callable("range", range_fn));
  g.emplace_back("bos_token", Value::string(bos_));
  g.emplace_back("eos_token", Value::string(eos_));
  g.emplace_back("messages", jinja::from_json(alias_reasoning(messages)));
  g.emplace_back("tools", tools.is_null() ? Value::none() : jinja::from_json(tools));
  g.emplace_back("documents", Value::none());
  g.emplace_back("add_generation_prompt", Value::boolean(add_generation_prompt));
  if (extra.is_object()) {
    for (auto it = extra.begin(); it != extra.end(); ++it) g.emplace_back(it.key(), jinja::from_json(it.value()));
  }
  Interpreter in(limits_);
  return in.render(*tpl_, g);
}

std::string ChatTemplate::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                 bool add_generation_prompt, const nlohmann::json& extra) const {
  return render(ojson::parse(messages.dump()), ojson::parse(tools.dump()), add_generation_prompt,
                ojson::parse(extra.dump()));
}

}  // namespace mlxcel
