#pragma once
// Constrained decoding for response_format {"type": "json_object"}: a JSON prefix automaton over
// bytes (RFC 8259 grammar; strings must be valid UTF-8, no control characters; exponents have at
// most two digits so every number is a finite double; at most 16 whitespace bytes in a row
// outside strings) and the per-step vocabulary mask built on
// it.
//
// The automaton knows the length of the shortest completion of the current prefix
// (closing_distance(): bytes still needed, e.g. `{"a":[1` needs `]}` = 2). Every incomplete
// state has a single byte that lowers the distance by one, and byte-level vocabularies hold every
// byte as a token, so masking each token whose prefix would need more bytes than tokens remain
// guarantees the value is complete before max_tokens or the context runs out.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mlxcel::runtime {

class JsonPrefix {
 public:
  // object_only: the top-level value must be an object (json_object mode); else any value.
  explicit JsonPrefix(bool object_only = true) : object_only_(object_only) {}

  // Feeds bytes; returns false (and leaves the state unspecified) when they cannot continue a
  // valid JSON text. Use a copy to test.
  bool feed(std::string_view bytes);
  bool feed_byte(unsigned char c);

  // Bytes the shortest valid completion needs; 0 once a complete value has been read.
  int closing_distance() const;
  // A complete top-level value has been read and nothing but whitespace may follow.
  bool complete() const { return mode_ == Mode::kDone || (stack_.empty() && mode_ == Mode::kNumber && num_complete()); }
  int depth() const { return static_cast<int>(stack_.size()); }

 private:
  enum class Mode : std::uint8_t {
    kStart,       // before the top-level value
    kValue,       // a value must come (after ':' or ',' in an array)
    kArrayFirst,  // after '[': a value or ']'
    kObjFirst,    // after '{': a key or '}'
    kKey,         // after ',' in an object: a key
    kColon,       // after a key
    kAfterValue,  // after a value in a container: ',' or the closer
    kString,
    kNumber,
    kLiteral,
    kDone,
  };
  enum class Num : std::uint8_t { kMinus, kZero, kInt, kDot, kFrac, kE, kESign, kExp };

  bool num_complete() const { return num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExp; }
  bool step_byte(unsigned char c);
  bool start_value(unsigned char c);
  void end_value();
  bool after_value(unsigned char c);

  bool object_only_;
  Mode mode_ = Mode::kStart;
  std::string stack_;        // '{' / '[' per open container (short: no allocation below 16)
  bool key_ = false;         // the string being read is an object key
  std::uint8_t escape_ = 0;  // 1: after '\'; 2..5: hex digits of \u still to read (5 - escape_ + 1)
  std::uint8_t utf8_left_ = 0;   // continuation bytes still expected
  std::uint8_t utf8_lo_ = 0x80, utf8_hi_ = 0xBF;  // allowed range of the next continuation byte
  Num num_ = Num::kInt;
  std::uint8_t exp_digits_ = 0;
  std::uint8_t ws_run_ = 0;  // consecutive whitespace outside strings
  const char* lit_ = nullptr;  // remaining letters of true / false / null
};

// Builds the vocabulary mask for one step: allowed[t] for every token id. `token_text[t]` is the
// exact text token t adds (empty: never allowed, e.g. special tokens); `remaining` is how many
// tokens may still be generated including this one.
void json_token_mask(const JsonPrefix& state, std::span<const std::string> token_text,
                     std::int64_t remaining, std::vector<std::uint8_t>& allowed);

}  // namespace mlxcel::runtime
