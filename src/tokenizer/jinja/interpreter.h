#pragma once
// Tree-walking Jinja interpreter with jinja2 semantics (ImmutableSandboxedEnvironment, as HF
// transformers renders chat templates). Every run is bounded: a step budget, an output size cap,
// a cap on the size of any built string or list, and a call depth limit, so a hostile template
// ends with an error instead of looping forever or exhausting memory.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace mlxcel::jinja {

struct Limits {
  uint64_t max_steps = 10'000'000;
  size_t max_output_bytes = 16u << 20;
  size_t max_items = 1u << 20;  // longest list / range a template may build
  int max_depth = 64;           // nested macro calls
  int max_nesting = 1500;       // nested evaluation (expressions, blocks, macro bodies): stack use
};

struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  int line = 0;
  // Positional argument i, else keyword `name`, else nullptr.
  const Value* get(size_t i, const char* name) const;
};

class Interpreter {
 public:
  explicit Interpreter(Limits limits = {}) : limits_(limits) {}
  std::string render(const Template& tpl, const std::vector<std::pair<std::string, Value>>& globals);

  [[noreturn]] void fail(int line, const std::string& msg) const;
  Value call(const Value& fn, Args& args, int line);
  void check_size(size_t n, int line) const;
  // A width argument (indent, center, tojson indent): negative counts as 0; over the output cap
  // fails.
  size_t width_arg(const Value& w, const char* what, int line) const;
  // A namespace() made during this render. Namespaces are the only mutable values, so only they
  // can form reference cycles ({% set ns.me = ns %}); render clears the ones still alive when it
  // ends, which breaks every cycle.
  void adopt_namespace(const std::shared_ptr<Dict>& d) { namespaces_.push_back(d); }

 private:
  enum class Flow : std::uint8_t { kNormal, kBreak, kContinue };
  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Value eval(const Expr& e);
  void step(int line);
  void write(const std::string& s, int line);
  std::string capture(const Body& body);

  const Value* lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  Value get_attr(const Value& obj, const std::string& name, int line);
  Value get_item(const Value& obj, const Value& key, int line);
  Value call_method(const Value& obj, const std::string& name, Args& args, int line);
  Value apply_filter(const std::string& name, const Value& v, Args& args, int line);
  bool apply_test(const std::string& name, const Value& v, Args& args, int line);
  Value binary(const std::string& op, const Value& a, const Value& b, int line);
  bool compare(const std::string& op, const Value& a, const Value& b, int line);
  std::vector<Value> iterate(const Value& v, int line);
  Value make_macro(const Stmt& s);
  Args eval_args(const CallArgs& ca, int line);
  void require_defined(const Value& v, int line) const;

  Limits limits_;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int nesting_ = 0;
  std::string* out_ = nullptr;
  std::vector<std::unordered_map<std::string, Value>> frames_;
  size_t base_ = 0;  // frames below base_ (except frame 0) are hidden inside a macro call
  std::unordered_map<std::string, Value> globals_;
  std::vector<std::weak_ptr<Dict>> namespaces_;
};

}  // namespace mlxcel::jinja
