#include "tokenizer/normalizer.h"

#include <vector>

#include "core/error.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace mlxcel::tok {
namespace {

using Fn = std::string (*)(std::string_view);

class FnNormalizer : public Normalizer {
 public:
  explicit FnNormalizer(Fn f) : f_(f) {}
  std::string normalize(std::string_view s) const override { return f_(s); }

 private:
  Fn f_;
};

class Strip : public Normalizer {
 public:
  Strip(bool l, bool r) : left_(l), right_(r) {}
  std::string normalize(std::string_view s) const override {
    std::u32string u = to_u32(s);
    size_t b = 0, e = u.size();
    if (left_) while (b < e && is_whitespace(u[b])) ++b;
    if (right_) while (e > b && is_whitespace(u[e - 1])) --e;
    return from_u32(std::u32string_view(u).substr(b, e - b));
  }

 private:
  bool left_, right_;
};

std::string strip_marks(std::string_view s, bool (*is_accent)(char32_t)) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_cp(s, i);
    if (!is_accent(c)) append_utf8(out, c);
  }
  return out;
}

class StripAccents : public Normalizer {
 public:
  std::string normalize(std::string_view s) const override { return strip_marks(s, &is_mark); }
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : p_(std::move(p)) {}
  std::string normalize(std::string_view s) const override {
    if (s.empty()) return {};
    return p_ + std::string(s);
  }

 private:
  std::string p_;
};

class Replace : public Normalizer {
 public:
  Replace(const nlohmann::json& pattern, std::string content) : content_(std::move(content)) {
    if (pattern.contains("String")) {
      literal_ = pattern["String"].get<std::string>();
      is_regex_ = false;
    } else if (pattern.contains("Regex")) {
      re_ = Regex(pattern["Regex"].get<std::string>());
      is_regex_ = true;
    } else {
      throw_error(ErrorCategory::kBadInput, "tokenizer.json: Replace needs pattern.String or .Regex");
    }
  }
  std::string normalize(std::string_view s) const override {
    std::string out;
    size_t last = 0;
    if (is_regex_) {
      for (auto [b, e] : re_.find_all(s)) {
        out.append(s.substr(last, b - last));
        out += content_;
        last = e;
      }
    } else {
      if (literal_.empty()) return std::string(s);
      for (size_t p = s.find(literal_); p != std::string_view::npos; p = s.find(literal_, last)) {
        out.append(s.substr(last, p - last));
        out += content_;
        last = p + literal_.size();
      }
    }
    out.append(s.substr(last));
    return out;
  }

 private:
  std::string literal_, content_;
  Regex re_;
  bool is_regex_ = false;
};

// BERT's normalizer (HF BertNormalizer): clean control chars, pad CJK, strip accents, lowercase.
class Bert : public Normalizer {
 public:
  Bert(bool clean, bool cjk, bool accents, bool lower)
      : clean_(clean), cjk_(cjk), accents_(accents), lower_(lower) {}
  std::string normalize(std::string_view s) const override {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      char32_t c = next_cp(s, i);
      if (clean_) {
        if (c == 0 || c == 0xFFFD || is_control(c)) continue;
        if (is_whitespace(c)) c = ' ';
      }
      if (cjk_ && is_cjk(c)) {
        out += ' ';
        append_utf8(out, c);
        out += ' ';
      } else {
        append_utf8(out, c);
      }
    }
    if (accents_) out = strip_marks(normalize_nfd(out), &is_mark_nonspacing);
    if (lower_) out = to_lower(out);
    return out;
  }

 private:
  bool clean_, cjk_, accents_, lower_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  std::string normalize(std::string_view s) const override {
    std::string cur(s);
    for (const auto& n : v_) cur = n->normalize(cur);
    return cur;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "NFC") return std::make_unique<FnNormalizer>(&normalize_nfc);
  if (type == "NFD") return std::make_unique<FnNormalizer>(&normalize_nfd);
  if (type == "NFKC") return std::make_unique<FnNormalizer>(&normalize_nfkc);
  if (type == "NFKD") return std::make_unique<FnNormalizer>(&normalize_nfkd);
  if (type == "Lowercase") return std::make_unique<FnNormalizer>(&to_lower);
  if (type == "Strip") return std::make_unique<Strip>(j.value("strip_left", true), j.value("strip_right", true));
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Prepend") return std::make_unique<Prepend>(j.at("prepend").get<std::string>());
  if (type == "Replace") return std::make_unique<Replace>(j.at("pattern"), j.at("content").get<std::string>());
  if (type == "BertNormalizer") {
    bool lower = j.value("lowercase", true);
    bool accents = j.contains("strip_accents") && !j["strip_accents"].is_null()
                       ? j["strip_accents"].get<bool>()
                       : lower;
    return std::make_unique<Bert>(j.value("clean_text", true), j.value("handle_chinese_chars", true),
                                  accents, lower);
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> v;
    for (const auto& n : j.at("normalizers")) {
      auto p = make_normalizer(n);
      if (p) v.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(v));
  }
  throw_error(ErrorCategory::kUnsupported,
              "tokenizer.json: normalizer type '" + type +
                  "' is not supported (supported: NFC NFD NFKC NFKD Lowercase Strip StripAccents "
                  "Prepend Replace BertNormalizer Sequence)");
}

}  // namespace mlxcel::tok
