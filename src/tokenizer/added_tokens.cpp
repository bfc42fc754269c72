#include "tokenizer/added_tokens.h"

#include "tokenizer/normalizer.h"
#include "tokenizer/unicode.h"

namespace mlxcel::tok {

void AddedVocabulary::add(const AddedToken& t) {
  if (t.content.empty()) return;
  auto it = by_content_.find(t.content);
  if (it != by_content_.end()) {
    tokens_[it->second] = t;
    by_id_[t.id] = it->second;
    return;
  }
  by_content_[t.content] = tokens_.size();
  by_id_[t.id] = tokens_.size();
  tokens_.push_back(t);
}

void AddedVocabulary::Trie::insert(const std::string& key, int32_t token) {
  if (nodes.empty()) {
    nodes.emplace_back();
    root.fill(-1);
  }
  int32_t cur = 0;
  for (size_t i = 0; i < key.size(); ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    int32_t nx = -1;
    if (cur == 0) {
      nx = root[c];
    } else {
      auto it = nodes[cur].next.find(c);
      if (it != nodes[cur].next.end()) nx = it->second;
    }
    if (nx < 0) {
      nx = static_cast<int32_t>(nodes.size());
      nodes.emplace_back();
      if (cur == 0) root[c] = nx;
      else nodes[cur].next[c] = nx;
    }
    cur = nx;
  }
  if (nodes[cur].token < 0) nodes[cur].token = token;
}

std::pair<size_t, int32_t> AddedVocabulary::Trie::longest(std::string_view s, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  if (nodes.empty()) return best;
  int32_t cur = root[static_cast<unsigned char>(s[pos])];
  size_t i = pos + 1;
  while (cur >= 0) {
    if (nodes[cur].token >= 0) best = {i - pos, nodes[cur].token};
    if (i >= s.size()) break;
    auto it = nodes[cur].next.find(static_cast<unsigned char>(s[i]));
    if (it == nodes[cur].next.end()) break;
    cur = it->second;
    ++i;
  }
  return best;
}

void AddedVocabulary::build(const Normalizer* normalizer) {
  raw_ = Trie();
  norm_ = Trie();
  for (size_t k = 0; k < tokens_.size(); ++k) {
    auto& t = tokens_[k];
    t.decode_content = t.normalized && normalizer ? normalizer->normalize(t.content) : t.content;
    t.skippable = t.special && t.decode_content == t.content;
    if (!t.normalized) {
      raw_.insert(t.content, static_cast<int32_t>(k));
    } else {
      std::string c = normalizer ? normalizer->normalize(t.content) : t.content;
      if (!c.empty()) norm_.insert(c, static_cast<int32_t>(k));
    }
  }
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::by_content(const std::string& c) const {
  auto it = by_content_.find(c);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

namespace {

bool is_word_char(char32_t c) { return c == '_' || is_alnum(c); }

char32_t last_cp(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  size_t j = i;
  return next_cp(s, j);
}

}  // namespace

void AddedVocabulary::split(std::vector<Segment>& segs, bool normalized) const {
  const Trie& trie = normalized ? norm_ : raw_;
  if (trie.empty()) return;
  std::vector<Segment> out;
  out.reserve(segs.size());
  for (auto& seg : segs) {
    if (seg.id >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string& s = seg.text;
    size_t emitted = 0;
    for (size_t pos = 0; pos < s.size();) {
      auto [len, tk] = trie.longest(s, pos);
      if (tk < 0) {
        ++pos;
        continue;
      }
      const AddedToken& t = tokens_[tk];
      size_t start = pos, stop = pos + len;
      if (t.single_word) {
        bool start_ok = start == 0 || !is_word_char(last_cp(std::string_view(s).substr(0, start)));
        size_t j = stop;
        bool stop_ok = stop == s.size() || !is_word_char(next_cp(s, j));
        if (!start_ok || !stop_ok) {
          pos = stop;
          continue;
        }
      }
      if (t.lstrip) {
        while (start > emitted) {
          size_t b = start;
          do --b; while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80);
          size_t j = b;
          if (!is_whitespace(next_cp(s, j))) break;
          start = b;
        }
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          size_t j = stop;
          if (!is_whitespace(next_cp(s, j))) break;
          stop = j;
        }
      }
      if (start > emitted) out.push_back({s.substr(emitted, start - emitted), -1, seg.at_start && emitted == 0});
      out.push_back({std::string(), t.id, false});
      emitted = stop;
      pos = stop;
    }
    if (emitted < s.size()) out.push_back({s.substr(emitted), -1, seg.at_start && emitted == 0});
  }
  segs.swap(out);
}

}  // namespace mlxcel::tok
