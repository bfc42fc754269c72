#pragma once
// Jinja lexer with the settings HF transformers uses for chat templates: trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False, newlines normalized to "\n", whitespace
// control with "-" and "+", {% raw %} blocks, comments.
#include <cstdint>
#include <string>
#include <vector>

namespace mlxcel::jinja {

enum class TokType : std::uint8_t {
  kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd,
  kName, kString, kInt, kFloat, kOp, kEof
};

struct Token {
  TokType type;
  std::string text;  // data text, name, decoded string, number spelling, operator
  int line;
};

// Throws mlxcel::Error (kBadInput) "chat template syntax error at line N: ...".
std::vector<Token> lex(const std::string& source);

}  // namespace mlxcel::jinja
