#pragma once
// Text <-> token ids, identical to HF `tokenizers` for the formats mlx-community checkpoints ship:
// tokenizer.json, vocab.json + merges.txt, and tiktoken tokenizer.model (Llama 3). A Tokenizer is
// immutable after loading and safe for concurrent const use; copies share the loaded data.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxcel {

namespace tok {
struct TokenizerImpl;
}

class Tokenizer {
 public:
  // Finds tokenizer.json, else vocab.json + merges.txt, else a tiktoken tokenizer.model, in
  // model_dir; reads tokenizer_config.json (added tokens, bos/eos, add_bos_token, chat template).
  static Tokenizer load(const std::string& model_dir);
  // Explicit loaders; config_path may be empty.
  static Tokenizer from_tokenizer_json(const std::string& path, const std::string& config_path = "");
  static Tokenizer from_vocab_merges(const std::string& vocab_path, const std::string& merges_path,
                                     const std::string& config_path = "");
  static Tokenizer from_tiktoken(const std::string& model_path, const std::string& config_path = "");
  // A tokenizer.json document already parsed (tests, embedded tokenizers).
  static Tokenizer from_json(const nlohmann::json& tokenizer_json, const nlohmann::json& config = nullptr);

  // Invalid UTF-8 in text is replaced by U+FFFD first (as Python's bytes.decode(errors="replace")).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // One past the largest id (model vocabulary plus added tokens), as len(tokenizer) in HF.
  size_t vocab_size() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // All ids that end generation: eos_token plus tokens such as <|eot_id|>, <|im_end|>, <|end|>.
  const std::vector<int32_t>& eos_ids() const;
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  bool is_special(int32_t id) const;
  // tokenizer_config.json "chat_template" (or chat_template.jinja); empty if none.
  const std::string& chat_template() const;

 private:
  explicit Tokenizer(std::shared_ptr<const tok::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tok::TokenizerImpl> impl_;
  friend class StreamingDecoder;
};

}  // namespace mlxcel
