#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace mlxcel::tok {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    std::array<bool, 256> direct{};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    int n = 0;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t c) {
  static const std::unordered_map<char32_t, int> inv = [] {
    std::unordered_map<char32_t, int> m;
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) m[t[b]] = b;
    return m;
  }();
  auto it = inv.find(c);
  return it == inv.end() ? -1 : it->second;
}

std::string bytes_to_byte_level(std::string_view s) {
  static const std::array<std::string, 256> enc = [] {
    std::array<std::string, 256> e;
    for (int b = 0; b < 256; ++b) e[b] = utf8_of(byte_to_unicode()[b]);
    return e;
  }();
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) out += enc[c];
  return out;
}

SplitBehavior parse_split_behavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  throw_error(ErrorCategory::kBadInput, "tokenizer.json: unknown split behavior '" + s + "'");
}

void split_by_matches(const Piece& p, const std::vector<std::pair<size_t, size_t>>& matches,
                      SplitBehavior behavior, bool invert, std::vector<Piece>& out) {
  struct Part {
    size_t b, e;
    bool m;
  };
  std::vector<Part> parts;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) parts.push_back({last, b, invert});
    parts.push_back({b, e, !invert});
    last = e;
  }
  if (last < p.text.size()) parts.push_back({last, p.text.size(), invert});

  std::vector<Part> res;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (auto& q : parts) if (!q.m) res.push_back(q);
      break;
    case SplitBehavior::kIsolated:
      res = parts;
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev = false;
      for (auto& q : parts) {
        if (q.m && !prev && !res.empty()) res.back().e = q.e;
        else res.push_back(q);
        prev = q.m;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev = false;
      for (size_t k = parts.size(); k-- > 0;) {
        auto& q = parts[k];
        if (q.m && !prev && !res.empty()) res.back().b = q.b;
        else res.push_back(q);
        prev = q.m;
      }
      std::reverse(res.begin(), res.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev = false;
      for (auto& q : parts) {
        if (q.m == prev && !res.empty()) res.back().e = q.e;
        else res.push_back(q);
        prev = q.m;
      }
      break;
    }
  }
  for (auto& q : res) {
    if (q.e == q.b) continue;
    out.push_back({p.text.substr(q.b, q.e - q.b), p.at_start && q.b == 0});
  }
}

namespace {

// Splits every piece with a per-piece function producing match ranges.
template <typename F>
void split_each(std::vector<Piece>& pieces, F&& find, SplitBehavior beh, bool invert) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const auto& p : pieces) split_by_matches(p, find(p.text), beh, invert, out);
  pieces.swap(out);
}

template <typename Pred>
std::vector<std::pair<size_t, size_t>> char_matches(const std::string& s, Pred pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size();) {
    size_t b = i;
    char32_t c = next_cp(s, i);
    if (pred(c)) m.emplace_back(b, i);
  }
  return m;
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    if (use_regex_) re_ = Regex(kGpt2Pattern);
  }
  void apply(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_) {
      for (auto& p : pieces) if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
    }
    if (use_regex_) {
      split_each(pieces, [&](const std::string& s) { return re_.find_all(s); },
                 SplitBehavior::kIsolated, false);
    }
    for (auto& p : pieces) p.text = bytes_to_byte_level(p.text);
  }

 private:
  bool add_prefix_space_, use_regex_;
  Regex re_;
};

class Split : public PreTokenizer {
 public:
  Split(const nlohmann::json& pattern, SplitBehavior beh, bool invert) : beh_(beh), invert_(invert) {
    if (pattern.contains("Regex")) {
      re_ = Regex(pattern["Regex"].get<std::string>());
    } else if (pattern.contains("String")) {
      literal_ = pattern["String"].get<std::string>();
    } else {
      throw_error(ErrorCategory::kBadInput, "tokenizer.json: Split needs pattern.String or .Regex");
    }
  }
  Split(Regex re, SplitBehavior beh, bool invert) : re_(std::move(re)), beh_(beh), invert_(invert) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) { return find(s); }, beh_, invert_);
  }

 private:
  std::vector<std::pair<size_t, size_t>> find(const std::string& s) const {
    if (re_.valid()) return re_.find_all(s);
    std::vector<std::pair<size_t, size_t>> m;
    if (literal_.empty()) return m;
    for (size_t p = s.find(literal_); p != std::string::npos; p = s.find(literal_, p + literal_.size()))
      m.emplace_back(p, p + literal_.size());
    return m;
  }
  Regex re_;
  std::string literal_;
  SplitBehavior beh_;
  bool invert_;
};

enum class PrependScheme : std::uint8_t { kAlways, kFirst, kNever };

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string repl, PrependScheme scheme, bool split)
      : repl_(std::move(repl)), scheme_(scheme), split_(split) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces) {
      std::string t;
      for (char c : p.text) {
        if (c == ' ') t += repl_;
        else t += c;
      }
      bool starts = t.compare(0, repl_.size(), repl_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start)))
        t.insert(0, repl_);
      p.text = std::move(t);
    }
    if (split_) {
      split_each(pieces, [&](const std::string& s) {
        std::vector<std::pair<size_t, size_t>> m;
        for (size_t q = s.find(repl_); q != std::string::npos; q = s.find(repl_, q + repl_.size()))
          m.emplace_back(q, q + repl_.size());
        return m;
      }, SplitBehavior::kMergedWithNext, false);
    }
  }

 private:
  std::string repl_;
  PrependScheme scheme_;
  bool split_;
};

class Whitespace : public PreTokenizer {
 public:
  // HF's \w+|[^\w\s]+ with Rust regex's Unicode \w: Alphabetic, marks, Nd, Pc, Join_Control.
  Whitespace()
      : re_(R"([\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|[^\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\s]+)") {}
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) { return re_.find_all(s); }, SplitBehavior::kRemoved, true);
  }

 private:
  Regex re_;
};

class CharSplit : public PreTokenizer {
 public:
  enum class Kind : std::uint8_t { kWhitespace, kDigits, kPunct, kDelimiter };
  CharSplit(Kind k, SplitBehavior beh, char32_t delim = 0) : k_(k), beh_(beh), delim_(delim) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) {
      return char_matches(s, [&](char32_t c) {
        switch (k_) {
          case Kind::kWhitespace: return is_whitespace(c);
          case Kind::kDigits: return is_numeric(c);
          case Kind::kPunct: return is_punctuation(c);
          case Kind::kDelimiter: return c == delim_;
        }
        return false;
      });
    }, beh_, false);
  }

 private:
  Kind k_;
  SplitBehavior beh_;
  char32_t delim_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& p : v_) p->apply(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>(j.value("add_prefix_space", true), j.value("use_regex", true));
  if (type == "Split") {
    return std::make_unique<Split>(j.at("pattern"), parse_split_behavior(j.value("behavior", "Isolated")),
                                   j.value("invert", false));
  }
  if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", "");
    PrependScheme ps = PrependScheme::kAlways;
    if (scheme.empty()) ps = j.value("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    else if (scheme == "first") ps = PrependScheme::kFirst;
    else if (scheme == "never") ps = PrependScheme::kNever;
    return std::make_unique<Metaspace>(j.value("replacement", "\xE2\x96\x81"), ps, j.value("split", true));
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") return std::make_unique<CharSplit>(CharSplit::Kind::kWhitespace, SplitBehavior::kRemoved);
  if (type == "Digits") {
    return std::make_unique<CharSplit>(CharSplit::Kind::kDigits, j.value("individual_digits", false)
                                                                     ? SplitBehavior::kIsolated
                                                                     : SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") {
    return std::make_unique<CharSplit>(CharSplit::Kind::kPunct, parse_split_behavior(j.value("behavior", "Isolated")));
  }
  if (type == "CharDelimiterSplit") {
    std::string d = j.at("delimiter").get<std::string>();
    size_t i = 0;
    return std::make_unique<CharSplit>(CharSplit::Kind::kDelimiter, SplitBehavior::kRemoved, next_cp(d, i));
  }
  if (type == "BertPreTokenizer") {
    std::vector<std::unique_ptr<PreTokenizer>> v;
    v.push_back(std::make_unique<CharSplit>(CharSplit::Kind::kWhitespace, SplitBehavior::kRemoved));
    v.push_back(std::make_unique<CharSplit>(CharSplit::Kind::kPunct, SplitBehavior::kIsolated));
    return std::make_unique<Sequence>(std::move(v));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> v;
    for (const auto& p : j.at("pretokenizers")) {
      auto q = make_pre_tokenizer(p);
      if (q) v.push_back(std::move(q));
    }
    return std::make_unique<Sequence>(std::move(v));
  }
  throw_error(ErrorCategory::kUnsupported,
              "tokenizer.json: pre_tokenizer type '" + type +
                  "' is not supported (supported: ByteLevel Split Metaspace Whitespace "
                  "WhitespaceSplit Digits Punctuation CharDelimiterSplit BertPreTokenizer Sequence)");
}

}  // namespace mlxcel::tok
