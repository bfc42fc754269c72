#pragma once
// The subword model of a tokenizer ("model" key of tokenizer.json): BPE, Unigram, WordPiece or
// WordLevel. tokenize() appends the ids of one pre-tokenized word.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxcel::tok {

class Model {
 public:
  virtual ~Model() = default;
  virtual void tokenize(std::string_view word, std::vector<int32_t>& out) const = 0;
  std::optional<int32_t> token_to_id(std::string_view t) const {
    auto it = vocab_.find(std::string(t));
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
  }
  const std::string* id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
    return &id_to_token_[id];
  }
  size_t vocab_size() const { return vocab_.size(); }
  // One past the largest id in the vocabulary.
  size_t id_bound() const { return id_to_token_.size(); }

 protected:
  void set_vocab(std::unordered_map<std::string, int32_t> v);
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
};

std::unique_ptr<Model> make_model(const nlohmann::json& j);

}  // namespace mlxcel::tok
