#include "tokenizer/bpe.h"

#include <cstdio>
#include <functional>
#include <queue>

#include "core/error.h"
#include "tokenizer/json_ids.h"
#include "tokenizer/unicode.h"
#include "tokenizer/unigram.h"
#include "tokenizer/wordpiece.h"

namespace mlxcel::tok {

void Model::set_vocab(std::unordered_map<std::string, int32_t> v) {
  vocab_ = std::move(v);
  int32_t mx = -1;
  for (auto& [k, id] : vocab_) mx = std::max(mx, id);
  id_to_token_.assign(static_cast<size_t>(mx + 1), {});
  has_id_.assign(static_cast<size_t>(mx + 1), false);
  for (auto& [k, id] : vocab_) {
    if (id < 0) throw_error(ErrorCategory::kBadInput, "tokenizer: negative id for token '" + k + "'");
    id_to_token_[id] = k;
    has_id_[id] = true;
  }
}

static uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

Bpe::Bpe(std::unordered_map<std::string, int32_t> vocab,
         const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions opt)
    : opt_(std::move(opt)) {
  set_vocab(std::move(vocab));
  size_t plen = opt_.continuing_subword_prefix.size();
  merges_.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const auto& [a, b] = merges[r];
    auto ia = token_to_id(a), ib = token_to_id(b);
    std::string merged = a + (b.size() >= plen ? b.substr(plen) : b);
    auto im = token_to_id(merged);
    if (!ia || !ib || !im) {
      throw_error(ErrorCategory::kBadInput, "tokenizer: merge '" + a + " " + b + "' (rank " +
                                                std::to_string(r) + ") uses a token missing from the vocab");
    }
    merges_.emplace(pair_key(*ia, *ib), MergeInfo{static_cast<int32_t>(r), *im});
  }
  if (opt_.unk_token) unk_id_ = token_to_id(*opt_.unk_token);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
    auto id = token_to_id(buf);
    byte_ids_[b] = id ? *id : -1;
  }
}

std::unique_ptr<Bpe> Bpe::from_json(const nlohmann::json& j) {
  std::unordered_map<std::string, int32_t> vocab;
  for (auto it = j.at("vocab").begin(); it != j.at("vocab").end(); ++it)
    vocab.emplace(it.key(), json_token_id(it.value(), "vocabulary token '" + it.key() + "'"));
  std::vector<std::pair<std::string, std::string>> merges;
  if (j.contains("merges")) {
    for (const auto& m : j["merges"]) {
      if (m.is_string()) {
        auto s = m.get<std::string>();
        // Vocabularies with real spaces in tokens (Llama 2's "  ") make "a b" ambiguous: take
        // the first split whose halves are both tokens.
        size_t sp = s.find(' ');
        if (sp == std::string::npos)
          throw_error(ErrorCategory::kBadInput, "tokenizer.json: merge '" + s + "' is not 'a b'");
        for (size_t q = sp; q != std::string::npos; q = s.find(' ', q + 1)) {
          if (vocab.count(s.substr(0, q)) && vocab.count(s.substr(q + 1))) {
            sp = q;
            break;
          }
        }
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        merges.emplace_back(m.at(0).get<std::string>(), m.at(1).get<std::string>());
      }
    }
  }
  BpeOptions o;
  auto str = [&](const char* k) -> std::string {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  if (j.contains("unk_token") && j["unk_token"].is_string()) o.unk_token = j["unk_token"].get<std::string>();
  o.continuing_subword_prefix = str("continuing_subword_prefix");
  o.end_of_word_suffix = str("end_of_word_suffix");
  o.fuse_unk = j.value("fuse_unk", false);
  o.byte_fallback = j.value("byte_fallback", false);
  o.ignore_merges = j.value("ignore_merges", false);
  return std::make_unique<Bpe>(std::move(vocab), merges, std::move(o));
}

void Bpe::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > kMaxCachedWord) {
    tokenize_uncached(word, out);
    return;
  }
  std::string key(word);
  auto& shard = cache_[std::hash<std::string>{}(key) % kShards];
  {
    std::lock_guard<std::mutex> lk(shard.mu);
    auto it = shard.map.find(key);
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t before = out.size();
  tokenize_uncached(word, out);
  std::lock_guard<std::mutex> lk(shard.mu);
  if (shard.map.size() < kShardCapacity)
    shard.map.emplace(std::move(key), std::vector<int32_t>(out.begin() + before, out.end()));
}

void Bpe::tokenize_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (opt_.ignore_merges) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Sym> syms;
  syms.reserve(word.size());
  const std::string& pre = opt_.continuing_subword_prefix;
  const std::string& suf = opt_.end_of_word_suffix;
  bool pending_unk = false;
  auto push = [&](int32_t id) {
    syms.push_back({id, static_cast<int32_t>(syms.size()) - 1, -1, true});
  };
  std::string tmp;
  for (size_t i = 0; i < word.size();) {
    size_t b = i;
    int n = utf8_seq_len(static_cast<unsigned char>(word[i]));
    i += n;
    bool first = b == 0, last = i >= word.size();
    std::string_view ch = word.substr(b, n);
    std::optional<int32_t> id;
    if ((!first && !pre.empty()) || (last && !suf.empty())) {
      tmp.clear();
      if (!first) tmp += pre;
      tmp += ch;
      if (last) tmp += suf;
      id = token_to_id(tmp);
    } else {
      id = token_to_id(ch);
    }
    if (id) {
      push(*id);
      pending_unk = false;
      continue;
    }
    if (opt_.byte_fallback) {
      bool all = true;
      for (unsigned char c : ch) all &= byte_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : ch) push(byte_ids_[c]);
        pending_unk = false;
        continue;
      }
    }
    if (unk_id_) {
      if (!(opt_.fuse_unk && pending_unk)) push(*unk_id_);
      pending_unk = true;
    }
  }
  for (size_t k = 0; k + 1 < syms.size(); ++k) syms[k].next = static_cast<int32_t>(k + 1);

  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> q;
  auto consider = [&](int32_t pos) {
    int32_t nx = syms[pos].next;
    if (nx < 0) return;
    auto it = merges_.find(pair_key(syms[pos].id, syms[nx].id));
    if (it != merges_.end()) q.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(syms.size()); ++k) consider(k);
  while (!q.empty()) {
    Cand c = q.top();
    q.pop();
    Sym& s = syms[c.pos];
    if (!s.alive || s.next < 0) continue;
    auto it = merges_.find(pair_key(s.id, syms[s.next].id));
    if (it == merges_.end() || it->second.rank != c.rank || it->second.new_id != c.new_id) continue;
    Sym& r = syms[s.next];
    r.alive = false;
    s.id = c.new_id;
    s.next = r.next;
    if (s.next >= 0) syms[s.next].prev = c.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(c.pos);
  }
  for (int32_t k = syms.empty() ? -1 : 0; k >= 0; k = syms[k].next) out.push_back(syms[k].id);
}

class WordLevel : public Model {
 public:
  explicit WordLevel(const nlohmann::json& j) {
    std::unordered_map<std::string, int32_t> v;
    for (auto it = j.at("vocab").begin(); it != j.at("vocab").end(); ++it) v.emplace(it.key(), json_token_id(it.value(), "vocabulary token '" + it.key() + "'"));
    set_vocab(std::move(v));
    if (j.contains("unk_token") && j["unk_token"].is_string()) unk_ = token_to_id(j["unk_token"].get<std::string>());
  }
  void tokenize(std::string_view word, std::vector<int32_t>& out) const override {
    if (auto id = token_to_id(word)) out.push_back(*id);
    else if (unk_) out.push_back(*unk_);
    else throw_error(ErrorCategory::kBadInput, "tokenizer: WordLevel has no unk_token for '" + std::string(word) + "'");
  }

 private:
  std::optional<int32_t> unk_;
};

std::unique_ptr<Model> make_model(const nlohmann::json& j) {
  // The 2020 GPT-2 tokenizer.json has no "type": it is BPE (it carries "merges").
  std::string type = j.value("type", j.contains("merges") ? "BPE" : "");
  if (type == "BPE") return Bpe::from_json(j);
  if (type == "Unigram") return std::make_unique<Unigram>(j);
  if (type == "WordPiece") return std::make_unique<WordPiece>(j);
  if (type == "WordLevel") return std::make_unique<WordLevel>(j);
  throw_error(ErrorCategory::kUnsupported, "tokenizer.json: model type '" + type +
                                               "' is not supported (BPE, Unigram, WordPiece, WordLevel)");
}

}  // namespace mlxcel::tok
