#pragma once
// Runtime values of the Jinja interpreter, with Python semantics where templates can observe
// them: str() / repr() spelling (None, True, 'quoted'), float repr, dict insertion order, tuple
// vs list printing, and jinja2's Undefined. Lists and dicts are immutable (as in
// ImmutableSandboxedEnvironment); namespace() objects are the only mutable values.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlxcel::jinja {

class Interpreter;
struct Value;

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  std::unordered_map<std::string, size_t> index;
  const Value* find(const std::string& k) const;
  void set(const std::string& k, Value v);
};

struct Args;
using NativeFn = std::function<Value(Interpreter&, Args&)>;

struct Callable {
  std::string name;
  NativeFn fn;
};

enum class Kind : std::uint8_t {
  kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable
};

struct Value {
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value; for undefined, the name that was looked up (for messages)
  std::shared_ptr<const List> list;
  std::shared_ptr<Dict> dict;  // kDict (never mutated after construction) and kNamespace
  std::shared_ptr<const Callable> fn;

  static Value undefined(std::string hint = {}) {
    Value v;
    v.s = std::move(hint);
    return v;
  }
  static Value none() {
    Value v;
    v.kind = Kind::kNone;
    return v;
  }
  static Value boolean(bool x) {
    Value v;
    v.kind = Kind::kBool;
    v.b = x;
    return v;
  }
  static Value integer(int64_t x) {
    Value v;
    v.kind = Kind::kInt;
    v.i = x;
    return v;
  }
  static Value real(double x) {
    Value v;
    v.kind = Kind::kFloat;
    v.f = x;
    return v;
  }
  static Value string(std::string x) {
    Value v;
    v.kind = Kind::kString;
    v.s = std::move(x);
    return v;
  }
  static Value make_list(std::vector<Value> items, bool tuple = false);
  static Value make_dict(std::shared_ptr<Dict> d);
  static Value make_namespace(std::shared_ptr<Dict> d);
  static Value callable(std::string name, NativeFn fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool truthy() const;
  double as_double() const { return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i); }
};

// Python's type name ("str", "int", "dict", "list", "NoneType", ...), for error messages.
std::string type_name(const Value& v);
// Python str() and repr().
std::string to_str(const Value& v);
std::string repr(const Value& v);
std::string py_repr_string(std::string_view s);
std::string py_float_repr(double d);
bool values_equal(const Value& a, const Value& b);

// json.dumps as HF's tojson filter calls it (ensure_ascii=False by default).
struct JsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // -1: None
  std::string indent_str;
  std::string item_sep = ", ", key_sep = ": ";
  bool sort_keys = false;
  size_t max_bytes = 16u << 20;  // the output cap: a huge indent or a deep value ends with an error
  int max_depth = 512;           // nesting of lists and dicts
};
std::string to_json(const Value& v, const JsonOptions& o);

// Throws bad_input when `j` nests deeper than `max_depth` (a request-supplied value).
Value from_json(const nlohmann::ordered_json& j, int max_depth = 512);

}  // namespace mlxcel::jinja
