#pragma once
// Byte-pair encoding as HF tokenizers implements it: lowest-rank merge first (leftmost on ties),
// byte_fallback to <0xNN> tokens, fuse_unk, ignore_merges, continuing_subword_prefix and
// end_of_word_suffix. A bounded, thread-safe word cache speeds up repeated words.
#include <array>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/model.h"

namespace mlxcel::tok {

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
};

class Bpe : public Model {
 public:
  Bpe(std::unordered_map<std::string, int32_t> vocab,
      const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt);
  static std::unique_ptr<Bpe> from_json(const nlohmann::json& j);
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  void tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const;
  struct MergeInfo {
    int32_t rank;
    int32_t new_id;
  };
  std::unordered_map<uint64_t, MergeInfo> merges_;
  BpeOptions opt_;
  std::optional<int32_t> unk_id_;
  std::array<int32_t, 256> byte_ids_{};  // <0xNN> ids, -1 if absent

  static constexpr size_t kShards = 16;
  static constexpr size_t kShardCapacity = 4096;
  static constexpr size_t kMaxCachedWord = 128;
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  mutable std::array<Shard, kShards> cache_;
};

}  // namespace mlxcel::tok
