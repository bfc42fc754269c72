#include "runtime/chat.h"

#include <algorithm>

#include "core/error.h"

namespace mlxcel::runtime {

ChatFormatter ChatFormatter::load(const std::string& model_dir) {
  ChatFormatter f(Tokenizer::load(model_dir));
  try {
    f.tmpl_ = ChatTemplate::from_model_dir(model_dir);
    if (f.tmpl_->source().empty()) f.tmpl_.reset();
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kBadInput || std::string(e.what()).find("has no chat_template") == std::string::npos)
      throw;
    f.tmpl_.reset();
  }
  if (f.tmpl_) f.markers_ = ReasoningSplitter::markers_for_template(f.tmpl_->source());
  return f;
}

std::string ChatFormatter::render(const nlohmann::json& messages, const nlohmann::json& tools,
                                  bool add_generation_prompt, const nlohmann::json& kwargs) const {
  if (!tmpl_)
    throw_error(ErrorCategory::kBadInput,
                "this model has no chat template (tokenizer_config.json chat_template or "
                "chat_template.jinja); use a raw prompt (--no-chat-template, /v1/completions)");
  return tmpl_->render(messages, tools, add_generation_prompt,
                       kwargs.is_object() ? kwargs : nlohmann::json::object());
}

std::vector<std::int32_t> ChatFormatter::encode_chat(const nlohmann::json& messages,
                                                     const nlohmann::json& tools,
                                                     const nlohmann::json& kwargs,
                                                     std::string* rendered) const {
  std::string text = render(messages, tools, true, kwargs);
  if (rendered) *rendered = text;
  return tokenizer_.encode(text, false);
}

std::vector<std::int32_t> ChatFormatter::encode_raw(const std::string& text) const {
  return tokenizer_.encode(text, true);
}

std::vector<std::int32_t> ChatFormatter::eos_ids(const std::vector<std::int32_t>& model_eos) const {
  std::vector<std::int32_t> ids = model_eos;
  for (auto id : tokenizer_.eos_ids()) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace mlxcel::runtime
