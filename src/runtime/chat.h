#pragma once
// Prompt building shared by the CLI and the server: the model's tokenizer and chat template,
// applied the way mlx-lm's generate does (render the template to text, then encode without
// adding special tokens; without a template, encode the raw text with them).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/reasoning.h"
#include "tokenizer/tokenizer.h"

namespace mlxcel::runtime {

class ChatFormatter {
 public:
  static ChatFormatter load(const std::string& model_dir);

  const Tokenizer& tokenizer() const { return tokenizer_; }
  bool has_template() const { return tmpl_.has_value(); }
  const ReasoningMarkers& reasoning_markers() const { return markers_; }

  // Renders `messages` (OpenAI format) with the template; throws bad_input when the model has
  // none (use raw prompts) or the template raises.
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools,
                     bool add_generation_prompt, const nlohmann::json& kwargs) const;
  std::vector<std::int32_t> encode_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                        const nlohmann::json& kwargs, std::string* rendered = nullptr) const;
  std::vector<std::int32_t> encode_raw(const std::string& text) const;

  // EOS ids: the model's (config/generation_config) ∪ the tokenizer's.
  std::vector<std::int32_t> eos_ids(const std::vector<std::int32_t>& model_eos) const;

 private:
  explicit ChatFormatter(Tokenizer t) : tokenizer_(std::move(t)) {}
  Tokenizer tokenizer_;
  std::optional<ChatTemplate> tmpl_;
  ReasoningMarkers markers_;
};

}  // namespace mlxcel::runtime
