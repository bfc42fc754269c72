#include "tokenizer/decoder.h"

#include "core/error.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace mlxcel::tok {
namespace {

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t last = 0;
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, last)) {
    out.append(s, last, p - last);
    out += to;
    last = p + from.size();
  }
  out.append(s, last, std::string::npos);
  return out;
}

// Byte-level tokens map back to bytes; a token with a char outside the byte alphabet keeps its
// UTF-8 bytes. Invalid UTF-8 in the result becomes U+FFFD (Rust from_utf8_lossy).
class ByteLevel : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      std::string tb;
      bool ok = true;
      for (size_t i = 0; i < t.size();) {
        int b = unicode_to_byte(next_cp(t, i));
        if (b < 0) {
          ok = false;
          break;
        }
        tb.push_back(static_cast<char>(b));
      }
      bytes += ok ? tb : t;
    }
    tokens.assign(1, sanitize_utf8(bytes));
  }
};

class Metaspace : public Decoder {
 public:
  Metaspace(std::string repl, bool prepend) : repl_(std::move(repl)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string t = replace_all(tokens[i], repl_, " ");
      if (i == 0 && prepend_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
      tokens[i] = std::move(t);
    }
  }

 private:
  std::string repl_;
  bool prepend_;
};

class Replace : public Decoder {
 public:
  Replace(const nlohmann::json& pattern, std::string content) : content_(std::move(content)) {
    if (pattern.contains("String")) {
      literal_ = pattern["String"].get<std::string>();
    } else {
      re_ = Regex(pattern.at("Regex").get<std::string>());
    }
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      if (!re_.valid()) {
        t = replace_all(t, literal_, content_);
        continue;
      }
      std::string out;
      size_t last = 0;
      for (auto [b, e] : re_.find_all(t)) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  std::string literal_, content_;
  Regex re_;
};

int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t[0] != '<' || t[1] != '0' || t[2] != 'x' || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int h = hex(t[3]), l = hex(t[4]);
  if (h < 0 || l < 0) return -1;
  return h * 16 + l;
}

// Runs of <0xNN> tokens become their bytes if those form valid UTF-8, else one U+FFFD per byte.
class ByteFallback : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    size_t pending_n = 0;
    auto flush = [&] {
      if (!pending_n) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending_n; ++k) out.push_back("\xEF\xBF\xBD");
      }
      pending.clear();
      pending_n = 0;
    };
    for (auto& t : tokens) {
      int b = parse_byte_token(t);
      if (b >= 0) {
        pending.push_back(static_cast<char>(b));
        ++pending_n;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }
};

class Fuse : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string s;
    for (auto& t : tokens) s += t;
    tokens.assign(1, std::move(s));
  }
};

class Strip : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop) : c_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::u32string u = to_u32(t);
      char32_t c = to_u32(c_).empty() ? U' ' : to_u32(c_)[0];
      size_t b = 0, e = u.size();
      for (size_t k = 0; k < start_ && b < e && u[b] == c; ++k) ++b;
      for (size_t k = 0; k < stop_ && e > b && u[e - 1] == c; ++k) --e;
      t = from_u32(std::u32string_view(u).substr(b, e - b));
    }
  }

 private:
  std::string c_;
  size_t start_, stop_;
};

std::string wordpiece_cleanup(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [a, b] : kRules) s = replace_all(s, a, b);
  return s;
}

class WordPieceDec : public Decoder {
 public:
  WordPieceDec(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t.erase(0, prefix_.size());
        else t.insert(0, " ");
      }
      if (cleanup_) t = wordpiece_cleanup(t);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDec : public Decoder {
 public:
  explicit BpeDec(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = replace_all(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
  }

 private:
  std::string suffix_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : v_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> v_;
};

}  // namespace

std::unique_ptr<Decoder> make_byte_level_decoder() { return std::make_unique<ByteLevel>(); }

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j) {
  if (j.is_null()) return nullptr;
  std::string type = j.value("type", "");
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Metaspace") {
    std::string scheme = j.value("prepend_scheme", "");
    bool prepend = scheme.empty() ? j.value("add_prefix_space", true) : scheme != "never";
    return std::make_unique<Metaspace>(j.value("replacement", "\xE2\x96\x81"), prepend);
  }
  if (type == "Replace") return std::make_unique<Replace>(j.at("pattern"), j.at("content").get<std::string>());
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") return std::make_unique<Strip>(j.value("content", " "), j.value("start", 0), j.value("stop", 0));
  if (type == "WordPiece") return std::make_unique<WordPieceDec>(j.value("prefix", "##"), j.value("cleanup", true));
  if (type == "BPEDecoder") return std::make_unique<BpeDec>(j.value("suffix", "</w>"));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> v;
    for (const auto& d : j.at("decoders")) {
      auto p = make_decoder(d);
      if (p) v.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(v));
  }
  throw_error(ErrorCategory::kUnsupported,
              "tokenizer.json: decoder type '" + type +
                  "' is not supported (ByteLevel Metaspace Replace ByteFallback Fuse Strip WordPiece "
                  "BPEDecoder Sequence)");
}

}  // namespace mlxcel::tok
