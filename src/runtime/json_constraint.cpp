#include "runtime/json_constraint.h"

#include <array>
#include <cstring>

namespace mlxcel::runtime {
namespace {

constexpr std::size_t kMaxDepth = 64;  // deeper nesting is refused (bounded state, no runaway)
constexpr int kMaxExpDigits = 2;        // 1e99 at most: no overflow to infinity
constexpr int kMaxWhitespaceRun = 16;   // consecutive whitespace bytes outside strings

bool is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

}  // namespace

bool JsonPrefix::feed(std::string_view bytes) {
  for (char c : bytes)
    if (!feed_byte(static_cast<unsigned char>(c))) return false;
  return true;
}

void JsonPrefix::end_value() { mode_ = stack_.empty() ? Mode::kDone : Mode::kAfterValue; }

bool JsonPrefix::start_value(unsigned char c) {
  switch (c) {
    case '{':
    case '[':
      if (stack_.size() >= kMaxDepth) return false;
      stack_.push_back(static_cast<char>(c));
      mode_ = c == '{' ? Mode::kObjFirst : Mode::kArrayFirst;
      return true;
    case '"':
      mode_ = Mode::kString;
      key_ = false;
      return true;
    case '-':
      mode_ = Mode::kNumber;
      num_ = Num::kMinus;
      return true;
    case 't': lit_ = "rue"; mode_ = Mode::kLiteral; return true;
    case 'f': lit_ = "alse"; mode_ = Mode::kLiteral; return true;
    case 'n': lit_ = "ull"; mode_ = Mode::kLiteral; return true;
    default:
      if (!is_digit(c)) return false;
      mode_ = Mode::kNumber;
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return true;
  }
}

bool JsonPrefix::after_value(unsigned char c) {
  if (is_ws(c)) return true;
  if (stack_.empty()) return false;
  const char top = stack_.back();
  if (c == ',') {
    mode_ = top == '{' ? Mode::kKey : Mode::kValue;
    return true;
  }
  if ((c == '}' && top == '{') || (c == ']' && top == '[')) {
    stack_.pop_back();
    end_value();
    return true;
  }
  return false;
}

bool JsonPrefix::feed_byte(unsigned char c) {
  // Whitespace between tokens is capped: models (and random weights) otherwise fill the budget
  // with it, and no JSON needs long runs.
  const bool structural_ws = is_ws(c) && mode_ != Mode::kString && mode_ != Mode::kLiteral;
  if (structural_ws && ws_run_ >= kMaxWhitespaceRun) return false;
  if (!step_byte(c)) return false;
  ws_run_ = structural_ws ? static_cast<std::uint8_t>(ws_run_ + 1) : 0;
  return true;
}

bool JsonPrefix::step_byte(unsigned char c) {
  switch (mode_) {
    case Mode::kDone:
      return is_ws(c);
    case Mode::kStart:
      if (is_ws(c)) return true;
      if (object_only_ && c != '{') return false;
      return start_value(c);
    case Mode::kValue:
      if (is_ws(c)) return true;
      return start_value(c);
    case Mode::kArrayFirst:
      if (is_ws(c)) return true;
      if (c == ']') {
        stack_.pop_back();
        end_value();
        return true;
      }
      return start_value(c);
    case Mode::kObjFirst:
    case Mode::kKey:
      if (is_ws(c)) return true;
      if (c == '}' && mode_ == Mode::kObjFirst) {
        stack_.pop_back();
        end_value();
        return true;
      }
      if (c != '"') return false;
      mode_ = Mode::kString;
      key_ = true;
      return true;
    case Mode::kColon:
      if (is_ws(c)) return true;
      if (c != ':') return false;
      mode_ = Mode::kValue;
      return true;
    case Mode::kAfterValue:
      return after_value(c);
    case Mode::kLiteral:
      if (c != static_cast<unsigned char>(*lit_)) return false;
      if (*++lit_ == '\0') end_value();
      return true;
    case Mode::kString:
      if (utf8_left_ > 0) {
        if (c < utf8_lo_ || c > utf8_hi_) return false;
        --utf8_left_;
        utf8_lo_ = 0x80;
        utf8_hi_ = 0xBF;
        return true;
      }
      if (escape_ == 1) {
        if (c == 'u') {
          escape_ = 2;
          return true;
        }
        if (c == 0 || !std::strchr("\"\\/bfnrt", c)) return false;
        escape_ = 0;
        return true;
      }
      if (escape_ >= 2) {
        if (!is_hex(c)) return false;
        escape_ = escape_ == 5 ? 0 : static_cast<std::uint8_t>(escape_ + 1);
        return true;
      }
      if (c == '"') {
        if (key_) mode_ = Mode::kColon;
        else end_value();
        return true;
      }
      if (c == '\\') {
        escape_ = 1;
        return true;
      }
      if (c < 0x20) return false;  // control characters must be escaped
      if (c < 0x80) return true;
      // UTF-8 lead bytes (RFC 3629: no overlongs, no surrogates, at most U+10FFFF).
      if (c >= 0xC2 && c <= 0xDF) utf8_left_ = 1;
      else if (c == 0xE0) { utf8_left_ = 2; utf8_lo_ = 0xA0; }
      else if (c == 0xED) { utf8_left_ = 2; utf8_hi_ = 0x9F; }
      else if (c >= 0xE1 && c <= 0xEF) utf8_left_ = 2;
      else if (c == 0xF0) { utf8_left_ = 3; utf8_lo_ = 0x90; }
      else if (c >= 0xF1 && c <= 0xF3) utf8_left_ = 3;
      else if (c == 0xF4) { utf8_left_ = 3; utf8_hi_ = 0x8F; }
      else return false;
      return true;
    case Mode::kNumber:
      switch (num_) {
        case Num::kMinus:
          if (!is_digit(c)) return false;
          num_ = c == '0' ? Num::kZero : Num::kInt;
          return true;
        case Num::kDot:
          if (!is_digit(c)) return false;
          num_ = Num::kFrac;
          return true;
        case Num::kE:
          if (c == '+' || c == '-') {
            num_ = Num::kESign;
            return true;
          }
          [[fallthrough]];
        case Num::kESign:
          if (!is_digit(c)) return false;
          num_ = Num::kExp;
          exp_digits_ = 1;
          return true;
        case Num::kZero:
        case Num::kInt:
        case Num::kFrac:
        case Num::kExp:
          if (is_digit(c) && num_ == Num::kExp) return ++exp_digits_ <= kMaxExpDigits;
          if (is_digit(c) && num_ != Num::kZero) return true;
          if (c == '.' && (num_ == Num::kZero || num_ == Num::kInt)) {
            num_ = Num::kDot;
            return true;
          }
          if ((c == 'e' || c == 'E') && num_ != Num::kExp) {
            num_ = Num::kE;
            return true;
          }
          // The number ends here; the byte belongs to what follows it.
          end_value();
          return step_byte(c);
      }
  }
  return false;
}

int JsonPrefix::closing_distance() const {
  const int closers = static_cast<int>(stack_.size());
  switch (mode_) {
    case Mode::kDone: return 0;
    case Mode::kStart: return object_only_ ? 2 : 1;
    case Mode::kValue: return 1 + closers;
    case Mode::kArrayFirst:
    case Mode::kObjFirst:
    case Mode::kAfterValue: return closers;
    case Mode::kKey: return 4 + closers;    // "":0
    case Mode::kColon: return 2 + closers;  // :0
    case Mode::kLiteral: return static_cast<int>(std::strlen(lit_)) + closers;
    case Mode::kNumber: return (num_complete() ? 0 : 1) + closers;
    case Mode::kString: {
      int esc = escape_ == 1 ? 1 : escape_ >= 2 ? 6 - escape_ : 0;
      return utf8_left_ + esc + 1 + (key_ ? 2 : 0) + closers;
    }
  }
  return closers;
}

void json_token_mask(const JsonPrefix& state, std::span<const std::string> token_text,
                     std::int64_t remaining, std::vector<std::uint8_t>& allowed) {
  allowed.assign(token_text.size(), 0);
  // Most tokens fail on their first byte: test the 256 bytes once.
  std::array<std::uint8_t, 256> first{};
  for (int b = 0; b < 256; ++b) {
    JsonPrefix s = state;
    first[b] = s.feed_byte(static_cast<unsigned char>(b)) ? 1 : 0;
  }
  const std::int64_t budget = remaining - 1;  // distance allowed after this token
  for (std::size_t t = 0; t < token_text.size(); ++t) {
    const std::string& text = token_text[t];
    if (text.empty() || !first[static_cast<unsigned char>(text[0])]) continue;
    JsonPrefix s = state;
    if (!s.feed(text)) continue;
    if (s.closing_distance() > budget) continue;
    allowed[t] = 1;
  }
}

}  // namespace mlxcel::runtime
