#pragma once
// Pre-tokenizers of HF tokenizer.json ("pre_tokenizer" key). They cut normalized text into the
// words the model encodes one at a time. at_start marks the piece that begins at offset 0 of the
// original input (Metaspace prepend_scheme "first" depends on it).
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"

namespace mlxcel::tok {

struct Piece {
  std::string text;
  bool at_start = false;
};

enum class SplitBehavior : std::uint8_t { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
SplitBehavior parse_split_behavior(const std::string& s);

// Cuts s at the given [begin,end) match ranges (sorted, non-overlapping) following HF's
// SplitDelimiterBehavior; invert swaps which parts count as matches. Empty parts are dropped.
void split_by_matches(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches,
                      SplitBehavior behavior, bool invert, std::vector<Piece>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j);

// The regexes the model families use (GPT-2 ByteLevel; Llama 3 / tiktoken; Qwen2).
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

// Byte-level alphabet of GPT-2: byte -> code point, and its inverse (-1 for none).
const std::array<char32_t, 256>& byte_to_unicode();
int unicode_to_byte(char32_t c);
std::string bytes_to_byte_level(std::string_view s);

}  // namespace mlxcel::tok
