#pragma once
// Parsing untrusted JSON (request bodies, tokenizer.json) with a nesting limit, in time linear in
// the input. Copying, dumping and converting a JSON value recurse once per level, so a value
// nested thousands deep must be refused while parsing. nlohmann's callback parser could check the
// depth, but its end_object scans the parent for discarded values, which makes a container of n
// objects cost O(n^2) (minutes for 10^5 objects); this SAX handler wraps the plain DOM builder.
#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mlxcel::json_util {

template <typename Json>
class BoundedSax {
 public:
  using number_integer_t = typename Json::number_integer_t;
  using number_unsigned_t = typename Json::number_unsigned_t;
  using number_float_t = typename Json::number_float_t;
  using string_t = typename Json::string_t;
  using binary_t = typename Json::binary_t;

  BoundedSax(Json& result, int max_depth)
      : dom_(result, /*allow_exceptions=*/false), max_depth_(max_depth) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) { return dom_.number_float(v, s); }
  bool string(string_t& v) { return dom_.string(v); }
  bool binary(binary_t& v) { return dom_.binary(v); }
  bool key(string_t& k) { return dom_.key(k); }
  bool start_object(std::size_t n) { return deeper() && dom_.start_object(n); }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return deeper() && dom_.start_array(n); }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = ex.what();
    return false;
  }

  // Empty when the parse succeeded.
  const std::string& error() const { return error_; }

 private:
  bool deeper() {
    if (++depth_ <= max_depth_) return true;
    error_ = "JSON nests deeper than " + std::to_string(max_depth_) + " levels";
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  int max_depth_;
  int depth_ = 0;
  std::string error_;
};

// Parses `input` (a string, or an input stream) as one JSON text nested at most `max_depth`
// levels; nullopt with the reason in `error` otherwise (syntax, depth, numbers outside double).
template <typename Json = nlohmann::json, typename Input>
std::optional<Json> parse_bounded(Input&& input, int max_depth, std::string* error = nullptr) {
  Json j;
  BoundedSax<Json> sax(j, max_depth);
  const bool ok = Json::sax_parse(std::forward<Input>(input), &sax);
  if (!ok || !sax.error().empty()) {
    if (error) *error = sax.error().empty() ? "invalid JSON" : sax.error();
    return std::nullopt;
  }
  return j;
}

}  // namespace mlxcel::json_util
