#pragma once
// Unigram language model (SentencePiece, as HF tokenizers implements it): Viterbi over the
// vocabulary scores; characters no piece covers become unk (score min - 10, consecutive unks
// fused), optionally replaced by <0xNN> byte tokens (byte_fallback).
#include <vector>

#include "tokenizer/model.h"

namespace mlxcel::tok {

class Unigram : public Model {
 public:
  explicit Unigram(const nlohmann::json& j);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  std::vector<double> scores_;
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = 0;
  size_t max_piece_bytes_ = 0;
};

}  // namespace mlxcel::tok
