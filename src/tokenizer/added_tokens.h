#pragma once
// Added and special tokens (tokenizer.json "added_tokens", tokenizer_config.json
// "added_tokens_decoder"). As in HF tokenizers, tokens with normalized=false are matched in the
// raw text before normalization, the others in the normalized text (their content normalized the
// same way); matching is leftmost-longest, then single_word / lstrip / rstrip apply.
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace mlxcel::tok {

class Normalizer;

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  // decode(skip_special_tokens) drops it. HF keeps its special-token set in normalized form, so
  // a normalized special token whose content the normalizer changes (Llama 2's <s> with
  // Prepend) is not skipped; we reproduce that.
  bool skippable = false;
  // The string decode() feeds to the decoder: HF uses the normalized content for normalized
  // tokens (Llama 2's <s> decodes as "\u2581<s>", i.e. " <s>" mid-text).
  std::string decode_content;
};

// A stretch of input: text still to encode, or one added token (id >= 0).
struct Segment {
  std::string text;
  int32_t id = -1;
  bool at_start = false;
};

class AddedVocabulary {
 public:
  void add(const AddedToken& t);
  // Builds the matchers; normalized tokens are matched by their normalized content.
  void build(const Normalizer* normalizer);
  // Splits each text segment around the tokens of one kind (normalized or not).
  void split(std::vector<Segment>& segs, bool normalized) const;

  const AddedToken* by_id(int32_t id) const;
  const AddedToken* by_content(const std::string& c) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Trie {
    struct Node {
      std::unordered_map<unsigned char, int32_t> next;
      int32_t token = -1;  // index into tokens_
    };
    std::vector<Node> nodes;
    std::array<int32_t, 256> root{};
    void insert(const std::string& key, int32_t token);
    // Longest key starting at s[pos]: returns (length, token index) or (0, -1).
    std::pair<size_t, int32_t> longest(std::string_view s, size_t pos) const;
    bool empty() const { return nodes.empty(); }
  };
  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  std::unordered_map<std::string, size_t> by_content_;
  Trie raw_, norm_;
};

}  // namespace mlxcel::tok
