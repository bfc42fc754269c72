#pragma once
// PCRE2 (UTF + UCP, JIT) wrapper. Matching is over code points with Unicode properties, which is
// what the Oniguruma regexes in HF tokenizers do. A compiled Regex is immutable and safe to use
// from several threads at once (match data is per call).
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mlxcel::tok {

class Regex {
 public:
  Regex() = default;
  explicit Regex(const std::string& pattern);
  // All non-overlapping matches as [begin, end) byte ranges, scanning left to right.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view s) const;
  const std::string& pattern() const { return pattern_; }
  bool valid() const { return code_ != nullptr; }

 private:
  std::string pattern_;
  std::shared_ptr<void> code_;  // pcre2_code_8*
};

}  // namespace mlxcel::tok
