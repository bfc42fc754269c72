#pragma once
// Token ids read from untrusted tokenizer files. A JSON number converted with get<int32_t>() is
// undefined behaviour when it is a float outside int's range and silently wraps when it is a
// large integer; and the vocabulary tables are sized by the largest id, so a file naming id 2^31-1
// would ask for gigabytes. Every id goes through these checks instead.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mlxcel::tok {

// Far above any real vocabulary (the largest are ~262k tokens), low enough that tables sized by
// the largest id stay small.
constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 24) - 1;

[[noreturn]] inline void bad_token_id(const std::string& what, const std::string& value) {
  throw_error(ErrorCategory::kBadInput, "tokenizer: " + what + " has id " + value +
                                            "; token ids must be integers from 0 to " +
                                            std::to_string(kMaxTokenId));
}

// `v` as a token id: a JSON integer in [0, kMaxTokenId].
template <typename Json>
std::int32_t json_token_id(const Json& v, const std::string& what) {
  if (v.is_number_unsigned()) {
    const auto u = v.template get<std::uint64_t>();
    if (u <= static_cast<std::uint64_t>(kMaxTokenId)) return static_cast<std::int32_t>(u);
  } else if (v.is_number_integer()) {
    const auto i = v.template get<std::int64_t>();
    if (i >= 0 && i <= kMaxTokenId) return static_cast<std::int32_t>(i);
  }
  bad_token_id(what, v.dump());
}

// A token id written as a decimal string (tokenizer_config.json's added_tokens_decoder keys).
inline std::int32_t string_token_id(const std::string& s, const std::string& what) {
  if (s.empty() || s.size() > 9) bad_token_id(what, "\"" + s + "\"");
  std::int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') bad_token_id(what, "\"" + s + "\"");
    v = v * 10 + (c - '0');
  }
  if (v > kMaxTokenId) bad_token_id(what, s);
  return static_cast<std::int32_t>(v);
}

}  // namespace mlxcel::tok
