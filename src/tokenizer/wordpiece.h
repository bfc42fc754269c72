#pragma once
// WordPiece (BERT): greedy longest-match-first with a continuing-subword prefix ("##"); a word
// with any uncovered part, or longer than max_input_chars_per_word, becomes one unk token.
#include "tokenizer/model.h"

namespace mlxcel::tok {

class WordPiece : public Model {
 public:
  explicit WordPiece(const nlohmann::json& j);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  std::string prefix_;
  size_t max_chars_ = 100;
  std::optional<int32_t> unk_id_;
  std::string unk_;
};

}  // namespace mlxcel::tok
