#pragma once
// UTF-8 helpers shared by the tokenizer and the Jinja interpreter. Text inside the tokenizer is
// always valid UTF-8: input is repaired once at the API boundary (sanitize_utf8).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mlxcel::tok {

// Decodes one code point at s[i], advancing i. Input must be valid UTF-8.
char32_t next_cp(std::string_view s, size_t& i);
void append_utf8(std::string& out, char32_t cp);
std::string utf8_of(char32_t cp);
std::u32string to_u32(std::string_view s);
std::string from_u32(std::u32string_view s);
size_t cp_count(std::string_view s);
// Length of the UTF-8 sequence starting with byte b (1 for invalid lead bytes).
int utf8_seq_len(unsigned char b);

// Replaces every maximal invalid subsequence with U+FFFD, exactly as Python's
// bytes.decode("utf-8", errors="replace") and Rust's String::from_utf8_lossy do.
std::string sanitize_utf8(std::string_view s);
bool is_valid_utf8(std::string_view s);

// Unicode character classes (utf8proc categories).
bool is_whitespace(char32_t c);   // Unicode White_Space, as Rust char::is_whitespace
bool is_punctuation(char32_t c);  // general category P*, plus ASCII punctuation
bool is_alnum(char32_t c);        // letters, marks, digits (Rust is_alphanumeric)
bool is_numeric(char32_t c);      // N*
bool is_control(char32_t c);      // Cc/Cf (BERT's definition, tab/newline excluded)
bool is_cjk(char32_t c);
bool is_mark_nonspacing(char32_t c);  // Mn: what BertNormalizer strip_accents removes
bool is_mark(char32_t c);  // M* (Mn, Mc, Me): what HF StripAccents removes

// Normalization forms via utf8proc.
std::string normalize_nfc(std::string_view s);
std::string normalize_nfd(std::string_view s);
std::string normalize_nfkc(std::string_view s);
std::string normalize_nfkd(std::string_view s);
std::string to_lower(std::string_view s);
std::string to_upper(std::string_view s);

}  // namespace mlxcel::tok
