#pragma once
// The loaded pipeline behind mlxcel::Tokenizer (shared by the streaming decoder).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/decoder.h"
#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"

namespace mlxcel::tok {

struct TokenizerImpl {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Model> model;
  std::unique_ptr<PostProcessor> post_processor;
  std::unique_ptr<Decoder> decoder;
  AddedVocabulary added;
  std::string bos_token, eos_token, chat_template;
  std::optional<int32_t> bos_id, eos_id;
  std::vector<int32_t> eos_ids;
  size_t id_bound = 0;

  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  std::string decode(const int32_t* ids, size_t n, bool skip_special) const;
  std::optional<std::string> id_to_token(int32_t id) const;
};

}  // namespace mlxcel::tok
