#pragma once
// tiktoken rank files ("<base64 token> <rank>" per line, Llama 3 tokenizer.model) turned into a
// byte-level BPE vocabulary and merge list the way HF transformers' TikTokenConverter does: every
// split of a token into two known tokens is a merge, ordered by the merged token's rank, then the
// left and right ranks.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mlxcel::tok {

struct TiktokenData {
  std::unordered_map<std::string, int32_t> vocab;  // byte-level strings
  std::vector<std::pair<std::string, std::string>> merges;
};

TiktokenData load_tiktoken(const std::string& path);

}  // namespace mlxcel::tok
