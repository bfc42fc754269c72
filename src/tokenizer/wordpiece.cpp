#include "tokenizer/wordpiece.h"

#include "core/error.h"
#include "tokenizer/json_ids.h"
#include "tokenizer/unicode.h"

namespace mlxcel::tok {

WordPiece::WordPiece(const nlohmann::json& j) {
  std::unordered_map<std::string, int32_t> v;
  for (auto it = j.at("vocab").begin(); it != j.at("vocab").end(); ++it) v.emplace(it.key(), json_token_id(it.value(), "vocabulary token '" + it.key() + "'"));
  set_vocab(std::move(v));
  prefix_ = j.value("continuing_subword_prefix", "##");
  max_chars_ = j.value("max_input_chars_per_word", 100);
  unk_ = j.value("unk_token", "[UNK]");
  unk_id_ = token_to_id(unk_);
}

void WordPiece::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  auto unk = [&] {
    if (!unk_id_) throw_error(ErrorCategory::kBadInput, "tokenizer: WordPiece unk token '" + unk_ + "' not in vocab");
    out.push_back(*unk_id_);
  };
  if (cp_count(word) > max_chars_) return unk();
  std::vector<int32_t> ids;
  std::string tmp;
  for (size_t start = 0; start < word.size();) {
    size_t end = word.size();
    std::optional<int32_t> cur;
    while (start < end) {
      tmp.clear();
      if (start > 0) tmp = prefix_;
      tmp.append(word.substr(start, end - start));
      if ((cur = token_to_id(tmp))) break;
      do --end; while (end > start && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80);
    }
    if (!cur) return unk();
    ids.push_back(*cur);
    start = end;
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace mlxcel::tok
