#include "tokenizer/jinja/lexer.h"

#include <cctype>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace mlxcel::jinja {

namespace {

[[noreturn]] void syntax_error(int line, const std::string& msg) {
  throw_error(ErrorCategory::kBadInput, "chat template syntax error at line " + std::to_string(line) + ": " + msg);
}

std::string normalize_newlines(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < s_.size()) {
      size_t open = find_open(pos_);
      std::string text = s_.substr(pos_, open - pos_);
      if (open >= s_.size()) {
        push_data(text);
        pos_ = open;
        break;
      }
      char kind = s_[open + 1];  // '{', '%' or '#'
      char ctl = open + 2 < s_.size() ? s_[open + 2] : '\0';
      if (ctl == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (ctl != '+' && kind != '{' && lstrip_) {
        size_t l = text.rfind('\n');
        size_t lpos = l == std::string::npos ? 0 : l + 1;
        bool ws = lpos < text.size();
        for (size_t k = lpos; k < text.size(); ++k) ws &= text[k] == ' ' || text[k] == '\t';
        if (ws && (lpos > 0 || (l == std::string::npos && line_starting))) text.resize(lpos);
      }
      count_lines(pos_, open);
      push_data(text);
      pos_ = open + 2 + (ctl == '-' || ctl == '+' ? 1 : 0);
      if (kind == '#') {
        size_t end = s_.find("#}", pos_);
        if (end == std::string::npos) syntax_error(line_, "unterminated comment '{#'");
        bool strip = end > pos_ && s_[end - 1] == '-';
        bool keep = end > pos_ && s_[end - 1] == '+';
        count_lines(pos_, end);
        pos_ = end + 2;
        after_tag(strip, !keep);
      } else if (kind == '%' && is_raw()) {
        lex_raw();
      } else {
        out_.push_back({kind == '{' ? TokType::kVarBegin : TokType::kBlockBegin, "", line_});
        lex_expr(kind == '{' ? '}' : '%');
      }
      line_starting = pos_ > 0 && s_[pos_ - 1] == '\n';
    }
    out_.push_back({TokType::kEof, "", line_});
    return std::move(out_);
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t p = s_.find('{', from); p != std::string::npos; p = s_.find('{', p + 1)) {
      if (p + 1 < s_.size() && (s_[p + 1] == '{' || s_[p + 1] == '%' || s_[p + 1] == '#')) return p;
    }
    return s_.size();
  }
  void count_lines(size_t a, size_t b) {
    for (size_t k = a; k < b && k < s_.size(); ++k) line_ += s_[k] == '\n';
  }
  void push_data(const std::string& t) {
    if (!t.empty()) out_.push_back({TokType::kData, t, data_line_});
    data_line_ = line_;
  }
  // After a tag: "-" strips all following whitespace; trim_blocks eats one newline.
  void after_tag(bool strip, bool trim) {
    if (strip) {
      size_t b = pos_;
      while (pos_ < s_.size() && is_space(s_[pos_])) ++pos_;
      count_lines(b, pos_);
    } else if (trim && pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
    data_line_ = line_;
  }
  bool is_raw() const {
    size_t p = pos_;
    while (p < s_.size() && is_space(s_[p])) ++p;
    return s_.compare(p, 3, "raw") == 0 && (p + 3 >= s_.size() || !std::isalnum(static_cast<unsigned char>(s_[p + 3])));
  }
  void lex_raw() {
    size_t close = s_.find("%}", pos_);
    if (close == std::string::npos) syntax_error(line_, "unterminated 'raw' tag");
    bool strip = s_[close - 1] == '-';
    count_lines(pos_, close);
    pos_ = close + 2;
    after_tag(strip, s_[close - 1] != '+');
    // Find {% endraw %} (with optional whitespace control).
    size_t p = pos_;
    while (true) {
      size_t o = s_.find("{%", p);
      if (o == std::string::npos) syntax_error(line_, "missing {% endraw %}");
      size_t q = o + 2;
      if (q < s_.size() && (s_[q] == '-' || s_[q] == '+')) ++q;
      while (q < s_.size() && is_space(s_[q])) ++q;
      if (s_.compare(q, 6, "endraw") == 0) {
        std::string text = s_.substr(pos_, o - pos_);
        if (s_[o + 2] == '-') while (!text.empty() && is_space(text.back())) text.pop_back();
        count_lines(pos_, o);
        push_data(text);
        size_t c = s_.find("%}", q);
        if (c == std::string::npos) syntax_error(line_, "unterminated 'endraw' tag");
        bool st = s_[c - 1] == '-';
        pos_ = c + 2;
        after_tag(st, s_[c - 1] != '+');
        return;
      }
      p = o + 2;
    }
  }
  void lex_expr(char closer) {
    const int start_line = line_;
    while (true) {
      while (pos_ < s_.size() && is_space(s_[pos_])) {
        line_ += s_[pos_] == '\n';
        ++pos_;
      }
      if (pos_ >= s_.size()) syntax_error(start_line, std::string("unexpected end of template, expected '") + closer + "}'");
      char c = s_[pos_];
      // End of tag, with optional whitespace control.
      if ((c == '-' || c == '+') && pos_ + 2 < s_.size() + 1 && s_.compare(pos_ + 1, 2, std::string(1, closer) + "}") == 0) {
        pos_ += 3;
        out_.push_back({closer == '}' ? TokType::kVarEnd : TokType::kBlockEnd, "", line_});
        after_tag(c == '-', closer == '%' && c != '+');
        return;
      }
      if (c == closer && pos_ + 1 < s_.size() && s_[pos_ + 1] == '}') {
        pos_ += 2;
        out_.push_back({closer == '}' ? TokType::kVarEnd : TokType::kBlockEnd, "", line_});
        after_tag(false, closer == '%');
        return;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t b = pos_;
        while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        out_.push_back({TokType::kName, s_.substr(b, pos_ - b), line_});
        continue;
      }
      if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t b = pos_;
        bool is_float = false;
        while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        if (pos_ + 1 < s_.size() && s_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
        }
        if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
          size_t q = pos_ + 1;
          if (q < s_.size() && (s_[q] == '+' || s_[q] == '-')) ++q;
          if (q < s_.size() && std::isdigit(static_cast<unsigned char>(s_[q]))) {
            is_float = true;
            pos_ = q;
            while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) ++pos_;
          }
        }
        std::string num;
        for (size_t k = b; k < pos_; ++k) if (s_[k] != '_') num += s_[k];
        out_.push_back({is_float ? TokType::kFloat : TokType::kInt, num, line_});
        continue;
      }
      if (c == '"' || c == '\'') {
        out_.push_back({TokType::kString, lex_string(c), line_});
        continue;
      }
      static const char* const kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~",
                                         "(", ")", "[", "]", "{", "}", ",", ".", ":", "|", "=", "<", ">", ";"};
      bool found = false;
      for (const char* op : kOps) {
        size_t n = std::char_traits<char>::length(op);
        if (s_.compare(pos_, n, op) == 0) {
          out_.push_back({TokType::kOp, op, line_});
          pos_ += n;
          found = true;
          break;
        }
      }
      if (!found) syntax_error(line_, std::string("unexpected character '") + c + "'");
    }
  }
  std::string lex_string(char q) {
    const int start = line_;
    ++pos_;
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) syntax_error(start, "unterminated string literal");
      char c = s_[pos_++];
      if (c == q) break;
      if (c == '\n') ++line_;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) syntax_error(start, "unterminated string literal");
      char e = s_[pos_++];
      auto hex = [&](int n) {
        if (pos_ + n > s_.size()) syntax_error(line_, "truncated escape in string literal");
        for (int k = 0; k < n; ++k)
          if (!std::isxdigit(static_cast<unsigned char>(s_[pos_ + static_cast<size_t>(k)])))
            syntax_error(line_, "invalid hexadecimal escape in string literal");
        char32_t v = static_cast<char32_t>(std::stoul(s_.substr(pos_, n), nullptr, 16));
        if (v > 0x10FFFF) syntax_error(line_, "escape beyond U+10FFFF in string literal");
        pos_ += n;
        tok::append_utf8(out, v);
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '0': out += '\0'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': ++line_; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default: out += '\\'; out += e;
      }
    }
    return out;
  }

  std::string s_;
  size_t pos_ = 0;
  int line_ = 1, data_line_ = 1;
  bool lstrip_ = true;
  std::vector<Token> out_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace mlxcel::jinja
