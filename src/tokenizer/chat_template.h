#pragma once
// Chat templates rendered exactly as HF transformers renders them (jinja2
// ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, {% generation %},
// globals raise_exception / strftime_now / namespace / dict, HF's tojson). Thread-safe for
// concurrent render() calls: the parsed template is immutable, each render has its own state.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/interpreter.h"

namespace mlxcel {

class ChatTemplate {
 public:
  // tokenizer_config.json "chat_template" (string, or the "default" entry of a list), else
  // chat_template.jinja, else chat_template.json; bos/eos tokens from tokenizer_config.json.
  static ChatTemplate from_model_dir(const std::string& dir);
  // Throws mlxcel::Error (kBadInput) with the line number on a syntax error.
  static ChatTemplate from_source(const std::string& source, std::string bos_token = "",
                                  std::string eos_token = "");

  // messages: OpenAI-style list (tool_calls with arguments as objects, tool results, content as
  // a string or a list of parts). tools: list of JSON schemas or null. extra_kwargs: further
  // template variables (enable_thinking, date_string, ...). Key order is kept, so tojson output
  // matches Python's json.dumps of the same document. Messages carrying reasoning under
  // reasoning_content / thinking / reasoning get all three names, as transformers does.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_kwargs = nlohmann::ordered_json::object()) const;
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt,
                     const nlohmann::json& extra_kwargs) const;

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }
  void set_limits(const jinja::Limits& l) { limits_ = l; }

 private:
  std::string source_, bos_, eos_;
  std::shared_ptr<const jinja::Template> tpl_;
  jinja::Limits limits_;
};

}  // namespace mlxcel
