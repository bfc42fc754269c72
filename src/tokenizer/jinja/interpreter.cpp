#include "tokenizer/jinja/interpreter.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace mlxcel::jinja {

namespace {

// Python's str.isspace set.
bool py_space(char32_t c) { return tok::is_whitespace(c) || (c >= 0x1C && c <= 0x1F); }

std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = tok::to_u32(s);
  std::u32string set;
  bool ws = !chars || chars->is_none() || chars->is_undefined();
  if (!ws) set = tok::to_u32(chars->s);
  auto strip_it = [&](char32_t c) { return ws ? py_space(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left) while (b < e && strip_it(u[b])) ++b;
  if (right) while (e > b && strip_it(u[e - 1])) --e;
  return tok::from_u32(std::u32string_view(u).substr(b, e - b));
}

std::string py_capitalize(const std::string& s) {
  std::u32string u = tok::to_u32(s);
  std::string out;
  for (size_t k = 0; k < u.size(); ++k) {
    std::string c = tok::utf8_of(u[k]);
    out += k == 0 ? tok::to_upper(c) : tok::to_lower(c);
  }
  return out;
}

// Python str.title(): a cased letter after an uncased character starts a word.
std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = tok::next_cp(s, i);
    std::string ch = tok::utf8_of(c);
    std::string lo = tok::to_lower(ch), up = tok::to_upper(ch);
    bool cased = lo != up;
    out += cased ? (prev_cased ? lo : up) : ch;
    prev_cased = cased;
  }
  return out;
}

// jinja2's title filter: words start after whitespace or one of -({[<.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool start = true;
  for (size_t i = 0; i < s.size();) {
    char32_t c = tok::next_cp(s, i);
    std::string ch = tok::utf8_of(c);
    bool sep = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out += ch;
      start = true;
    } else {
      out += start ? tok::to_upper(ch) : tok::to_lower(ch);
      start = false;
    }
  }
  return out;
}

std::vector<std::string> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep || sep->is_none()) {
    std::u32string u = tok::to_u32(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_space(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = u.size();
        while (e > i && py_space(u[e - 1])) --e;
        out.push_back(tok::from_u32(std::u32string_view(u).substr(i, e - i)));
        return out;
      }
      size_t b = i;
      while (i < u.size() && !py_space(u[i])) ++i;
      out.push_back(tok::from_u32(std::u32string_view(u).substr(b, i - b)));
    }
    return out;
  }
  const std::string& d = sep->s;
  size_t last = 0;
  for (size_t p = s.find(d); p != std::string::npos && !d.empty(); p = s.find(d, last)) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    out.push_back(s.substr(last, p - last));
    last = p + d.size();
  }
  out.push_back(s.substr(last));
  return out;
}

std::string replace_str(const std::string& s, const std::string& a, const std::string& b,
                        int64_t count, size_t cap) {
  std::string out;
  auto check = [&]() {
    if (out.size() > cap)
      throw_error(ErrorCategory::kBadInput,
                  "replace: the result exceeds " + std::to_string(cap) + " bytes");
  };
  if (a.empty()) {
    // Python inserts b between every character (and at both ends).
    std::u32string u = tok::to_u32(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += b;
        ++n;
        check();
      }
      tok::append_utf8(out, c);
    }
    if (count < 0 || n < count) out += b;
    return out;
  }
  size_t last = 0;
  int64_t n = 0;
  for (size_t p = s.find(a); p != std::string::npos && (count < 0 || n < count); p = s.find(a, last), ++n) {
    out.append(s, last, p - last);
    out += b;
    check();
    last = p + a.size();
  }
  out.append(s, last, std::string::npos);
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value str_list(const std::vector<std::string>& v) {
  std::vector<Value> items;
  items.reserve(v.size());
  for (const auto& s : v) items.push_back(Value::string(s));
  return Value::make_list(std::move(items));
}

// Python-style index normalization for a sequence of length n.
bool norm_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && i < static_cast<int64_t>(n);
}

bool is_int_like(const Value& v) { return v.kind == Kind::kInt || v.kind == Kind::kBool; }
int64_t as_int(const Value& v) { return v.kind == Kind::kBool ? v.b : v.i; }

// Python's int(float): truncation; a value outside int64 (or NaN / inf) is an error here, since
// our integers are 64-bit and the C++ conversion would be undefined.
int64_t float_to_int(double f) {
  if (!(f > -9223372036854775808.0 && f < 9223372036854775808.0))
    throw_error(ErrorCategory::kBadInput, "chat template error: cannot convert " + std::to_string(f) + " to a 64-bit integer");
  return static_cast<int64_t>(f);
}

int64_t floordiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

const Value* Args::get(size_t i, const char* name) const {
  if (i < pos.size()) return &pos[i];
  if (name) {
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
  }
  return nullptr;
}

void Interpreter::fail(int line, const std::string& msg) const {
  throw_error(ErrorCategory::kBadInput, "chat template error at line " + std::to_string(line) + ": " + msg);
}

void Interpreter::check_size(size_t n, int line) const {
  if (n > limits_.max_items)
    fail(line, "value too large (" + std::to_string(n) + " items; limit " + std::to_string(limits_.max_items) + ")");
}

size_t Interpreter::width_arg(const Value& w, const char* what, int line) const {
  if (!is_int_like(w))
    fail(line, std::string(what) + ": the width must be an integer, got " + type_name(w));
  const int64_t n = as_int(w);
  if (n < 0) return 0;
  if (static_cast<uint64_t>(n) > limits_.max_output_bytes)
    fail(line, std::string(what) + ": width " + std::to_string(n) +
                   " exceeds the output limit of " + std::to_string(limits_.max_output_bytes) +
                   " bytes");
  return static_cast<size_t>(n);
}

void Interpreter::step(int line) {
  if (++steps_ > limits_.max_steps)
    fail(line, "template exceeded " + std::to_string(limits_.max_steps) + " evaluation steps (endless loop?)");
}

void Interpreter::write(const std::string& s, int line) {
  out_->append(s);
  if (out_->size() > limits_.max_output_bytes)
    fail(line, "output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
}

void Interpreter::require_defined(const Value& v, int line) const {
  if (v.is_undefined()) fail(line, v.s.empty() ? "value is undefined" : v.s);
}

const Value* Interpreter::lookup(const std::string& name) const {
  for (size_t k = frames_.size(); k-- > base_;) {
    auto it = frames_[k].find(name);
    if (it != frames_[k].end()) return &it->second;
  }
  if (base_ > 0) {
    auto it = frames_[0].find(name);
    if (it != frames_[0].end()) return &it->second;
  }
  auto it = globals_.find(name);
  return it == globals_.end() ? nullptr : &it->second;
}

void Interpreter::assign(const std::string& name, Value v) { frames_.back()[name] = std::move(v); }

std::string Interpreter::render(const Template& tpl, const std::vector<std::pair<std::string, Value>>& globals) {
  globals_.clear();
  for (const auto& [k, v] : globals) globals_[k] = v;
  frames_.assign(1, {});
  base_ = 0;
  steps_ = 0;
  nesting_ = 0;
  depth_ = 0;
  std::string out;
  out_ = &out;
  struct BreakCycles {
    Interpreter& in;
    ~BreakCycles() {
      for (auto& w : in.namespaces_)
        if (auto d = w.lock()) {
          d->items.clear();
          d->index.clear();
        }
      in.namespaces_.clear();
      in.frames_.assign(1, {});
    }
  } guard{*this};
  exec_body(tpl.body);
  out_ = nullptr;
  return out;
}

std::string Interpreter::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Interpreter::Flow Interpreter::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

std::vector<Value> Interpreter::iterate(const Value& v, int line) {
  switch (v.kind) {
    case Kind::kUndefined: return {};
    case Kind::kList: return v.list->items;
    case Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, x] : v.dict->items) keys.push_back(Value::string(k));
      return keys;
    }
    case Kind::kString: {
      std::vector<Value> chars;
      for (size_t i = 0; i < v.s.size();) {
        size_t b = i;
        tok::next_cp(v.s, i);
        chars.push_back(Value::string(v.s.substr(b, i - b)));
      }
      return chars;
    }
    default: fail(line, "'" + type_name(v) + "' object is not iterable");
  }
}

Interpreter::Flow Interpreter::exec(const Stmt& s) {
  if (++nesting_ > limits_.max_nesting) {
    --nesting_;
    fail(s.line, "evaluation nests deeper than " + std::to_string(limits_.max_nesting) + " levels");
  }
  struct Unnest {
    int& n;
    ~Unnest() { --n; }
  } unnest{nesting_};
  step(s.line);
  switch (s.kind) {
    case StmtKind::kData: write(s.text, s.line); return Flow::kNormal;
    case StmtKind::kOutput: write(to_str(eval(*s.expr)), s.line); return Flow::kNormal;
    case StmtKind::kIf:
      for (const auto& [cond, body] : s.branches) {
        if (!cond || eval(*cond).truthy()) return exec_body(body);
      }
      return Flow::kNormal;
    case StmtKind::kFor: {
      std::vector<Value> items = iterate(eval(*s.expr), s.line);
      auto bind = [&](const Value& item) {
        if (s.targets.size() == 1) {
          assign(s.targets[0], item);
          return;
        }
        if (!item.is_list() || item.list->items.size() != s.targets.size())
          fail(s.line, "cannot unpack " + type_name(item) + " into " + std::to_string(s.targets.size()) + " loop variables");
        for (size_t k = 0; k < s.targets.size(); ++k) assign(s.targets[k], item.list->items[k]);
      };
      if (s.loop_filter) {
        std::vector<Value> kept;
        for (const auto& it : items) {
          frames_.emplace_back();
          bind(it);
          bool keep = eval(*s.loop_filter).truthy();
          frames_.pop_back();
          if (keep) kept.push_back(it);
        }
        items.swap(kept);
      }
      if (items.empty()) {
        if (!s.else_body.empty()) return exec_body(s.else_body);
        return Flow::kNormal;
      }
      const size_t n = items.size();
      for (size_t k = 0; k < n; ++k) {
        step(s.line);
        frames_.emplace_back();
        auto loop = std::make_shared<Dict>();
        loop->set("index", Value::integer(static_cast<int64_t>(k + 1)));
        loop->set("index0", Value::integer(static_cast<int64_t>(k)));
        loop->set("revindex", Value::integer(static_cast<int64_t>(n - k)));
        loop->set("revindex0", Value::integer(static_cast<int64_t>(n - k - 1)));
        loop->set("first", Value::boolean(k == 0));
        loop->set("last", Value::boolean(k + 1 == n));
        loop->set("length", Value::integer(static_cast<int64_t>(n)));
        loop->set("depth", Value::integer(1));
        loop->set("depth0", Value::integer(0));
        loop->set("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
        loop->set("nextitem", k + 1 < n ? items[k + 1] : Value::undefined("there is no next item"));
        loop->set("cycle", Value::callable("cycle", [k](Interpreter& in, Args& a) {
          if (a.pos.empty()) in.fail(a.line, "no items for cycling given");
          return a.pos[k % a.pos.size()];
        }));
        assign("loop", Value::make_dict(loop));
        bind(items[k]);
        Flow f;
        try {
          f = exec_body(s.body);
        } catch (...) {
          frames_.pop_back();
          throw;
        }
        frames_.pop_back();
        if (f == Flow::kBreak) break;
      }
      return Flow::kNormal;
    }
    case StmtKind::kSet: {
      Value v = eval(*s.expr);
      if (!s.ns_attr.empty()) {
        const Value* ns = lookup(s.targets[0]);
        if (!ns || ns->kind != Kind::kNamespace)
          fail(s.line, "cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
        if (!s.ns_attr.empty() && s.ns_attr[0] == '_')
          fail(s.line, "chat templates cannot store underscore-prefixed attributes on a namespace");
        ns->dict->set(s.ns_attr, std::move(v));
        return Flow::kNormal;
      }
      if (s.targets.size() == 1) {
        assign(s.targets[0], std::move(v));
      } else {
        if (!v.is_list() || v.list->items.size() != s.targets.size())
          fail(s.line, "cannot unpack " + type_name(v) + " into " + std::to_string(s.targets.size()) + " names");
        for (size_t k = 0; k < s.targets.size(); ++k) assign(s.targets[k], v.list->items[k]);
      }
      return Flow::kNormal;
    }
    case StmtKind::kSetBlock: {
      Value v = Value::string(capture(s.body));
      for (const auto& f : s.filters) {
        Args a = eval_args(f->call, f->line);
        v = apply_filter(f->name, v, a, f->line);
      }
      assign(s.name, std::move(v));
      return Flow::kNormal;
    }
    case StmtKind::kMacro: assign(s.name, make_macro(s)); return Flow::kNormal;
    case StmtKind::kCallBlock: {
      const Stmt* sp = &s;
      Value caller = Value::callable("caller", [sp](Interpreter& in, Args& a) {
        in.frames_.emplace_back();
        for (size_t k = 0; k < sp->params.size(); ++k) {
          const Value* v = a.get(k, sp->params[k].name.c_str());
          in.assign(sp->params[k].name, v ? *v : (sp->params[k].def ? in.eval(*sp->params[k].def) : Value::undefined()));
        }
        std::string r;
        try {
          r = in.capture(sp->body);
        } catch (...) {
          in.frames_.pop_back();
          throw;
        }
        in.frames_.pop_back();
        return Value::string(r);
      });
      const Expr& ce = *s.expr;
      Value fn = eval(*ce.a);
      Args a = eval_args(ce.call, ce.line);
      a.kw.emplace_back("caller", caller);
      write(to_str(call(fn, a, s.line)), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kFilterBlock: {
      Value v = Value::string(capture(s.body));
      for (const auto& f : s.filters) {
        Args a = eval_args(f->call, f->line);
        v = apply_filter(f->name, v, a, f->line);
      }
      write(to_str(v), s.line);
      return Flow::kNormal;
    }
    case StmtKind::kBreak: return Flow::kBreak;
    case StmtKind::kContinue: return Flow::kContinue;
    case StmtKind::kGeneration: return exec_body(s.body);
    case StmtKind::kWith: {
      std::unordered_map<std::string, Value> f;
      for (const auto& [n, e] : s.assigns) f[n] = eval(*e);
      frames_.push_back(std::move(f));
      Flow r;
      try {
        r = exec_body(s.body);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      return r;
    }
  }
  return Flow::kNormal;
}

Value Interpreter::make_macro(const Stmt& s) {
  const Stmt* sp = &s;
  return Value::callable(s.name, [sp](Interpreter& in, Args& a) {
    if (a.pos.size() > sp->params.size())
      in.fail(a.line, "macro '" + sp->name + "' takes not more than " + std::to_string(sp->params.size()) +
                          " argument(s)");
    if (++in.depth_ > in.limits_.max_depth) {
      --in.depth_;
      in.fail(a.line, "macro calls nested deeper than " + std::to_string(in.limits_.max_depth));
    }
    size_t saved_base = in.base_;
    in.base_ = in.frames_.size();
    in.frames_.emplace_back();
    std::string r;
    try {
      for (size_t k = 0; k < sp->params.size(); ++k) {
        const Value* v = a.get(k, sp->params[k].name.c_str());
        in.assign(sp->params[k].name,
                  v ? *v : (sp->params[k].def ? in.eval(*sp->params[k].def) : Value::undefined(
                                                    "parameter '" + sp->params[k].name + "' was not provided")));
      }
      for (const auto& [k, v] : a.kw)
        if (k == "caller") in.assign("caller", v);
      r = in.capture(sp->body);
    } catch (...) {
      in.frames_.pop_back();
      in.base_ = saved_base;
      --in.depth_;
      throw;
    }
    in.frames_.pop_back();
    in.base_ = saved_base;
    --in.depth_;
    return Value::string(r);
  });
}

Args Interpreter::eval_args(const CallArgs& ca, int line) {
  Args a;
  a.line = line;
  for (const auto& e : ca.args) a.pos.push_back(eval(*e));
  for (const auto& [k, e] : ca.kwargs) a.kw.emplace_back(k, eval(*e));
  return a;
}

Value Interpreter::call(const Value& fn, Args& args, int line) {
  if (fn.kind != Kind::kCallable) {
    require_defined(fn, line);
    fail(line, "'" + type_name(fn) + "' object is not callable");
  }
  args.line = line;
  return fn.fn->fn(*this, args);
}

Value Interpreter::get_attr(const Value& obj, const std::string& name, int line) {
  require_defined(obj, line);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    static const char* const kDictMethods[] = {"items", "keys", "values", "get"};
    if (obj.kind == Kind::kDict) {
      for (const char* m : kDictMethods) {
        if (name == m) {
          Value self = obj;
          return Value::callable(name, [this, self, name](Interpreter&, Args& a) {
            return call_method(self, name, a, a.line);
          });
        }
      }
    }
    if (const Value* v = obj.dict->find(name)) return *v;
    return Value::undefined("'" + std::string(obj.kind == Kind::kDict ? "dict object" : "Namespace") +
                            "' has no attribute '" + name + "'");
  }
  static const char* const kStrMethods[] = {
      "strip", "lstrip", "rstrip", "upper", "lower", "title", "capitalize", "split", "rsplit", "splitlines",
      "startswith", "endswith", "replace", "find", "rfind", "index", "count", "join", "removeprefix",
      "removesuffix", "isdigit", "isspace", "isalnum", "isalpha", "isupper", "islower", "format"};
  bool known = false;
  if (obj.kind == Kind::kString) {
    for (const char* m : kStrMethods) known |= name == m;
  } else if (obj.kind == Kind::kList) {
    known = name == "index" || name == "count";
  }
  if (known) {
    Value self = obj;
    return Value::callable(name, [this, self, name](Interpreter&, Args& a) {
      return call_method(self, name, a, a.line);
    });
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

Value Interpreter::get_item(const Value& obj, const Value& key, int line) {
  require_defined(obj, line);
  if (obj.kind == Kind::kDict || obj.kind == Kind::kNamespace) {
    std::string k = key.is_string() ? key.s : to_str(key);
    if (const Value* v = obj.dict->find(k)) return *v;
    if (key.is_string()) return get_attr(obj, key.s, line);
    return Value::undefined("'dict object' has no attribute '" + k + "'");
  }
  if (obj.kind == Kind::kList || obj.kind == Kind::kString) {
    if (!is_int_like(key)) {
      if (key.is_string()) return get_attr(obj, key.s, line);
      return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + to_str(key) + "'");
    }
    int64_t i = as_int(key);
    if (obj.kind == Kind::kList) {
      if (!norm_index(i, obj.list->items.size()))
        return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + to_str(key) + "'");
      return obj.list->items[i];
    }
    std::u32string u = tok::to_u32(obj.s);
    if (!norm_index(i, u.size())) return Value::undefined("'str object' has no attribute '" + to_str(key) + "'");
    return Value::string(tok::utf8_of(u[i]));
  }
  return Value::undefined("'" + type_name(obj) + " object' has no attribute '" + to_str(key) + "'");
}

Value Interpreter::call_method(const Value& obj, const std::string& name, Args& a, int line) {
  auto arg = [&](size_t i, const char* n) { return a.get(i, n); };
  if (obj.kind == Kind::kString) {
    const std::string& s = obj.s;
    if (name == "strip") return Value::string(py_strip(s, arg(0, "chars"), true, true));
    if (name == "lstrip") return Value::string(py_strip(s, arg(0, "chars"), true, false));
    if (name == "rstrip") return Value::string(py_strip(s, arg(0, "chars"), false, true));
    if (name == "upper") return Value::string(tok::to_upper(s));
    if (name == "lower") return Value::string(tok::to_lower(s));
    if (name == "title") return Value::string(py_title(s));
    if (name == "capitalize") return Value::string(py_capitalize(s));
    if (name == "split" || name == "rsplit") {
      const Value* ms = arg(1, "maxsplit");
      return str_list(py_split(s, arg(0, "sep"), ms ? as_int(*ms) : -1));
    }
    if (name == "splitlines") {
      std::vector<std::string> lines;
      size_t last = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n' || s[k] == '\r') {
          lines.push_back(s.substr(last, k - last));
          if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') ++k;
          last = k + 1;
        }
      }
      if (last < s.size()) lines.push_back(s.substr(last));
      return str_list(lines);
    }
    if (name == "startswith" || name == "endswith") {
      const Value* p = arg(0, "prefix");
      if (!p) fail(line, name + "() takes at least 1 argument");
      std::vector<std::string> cands;
      if (p->is_list()) for (const auto& x : p->list->items) cands.push_back(x.s);
      else if (p->is_string()) cands.push_back(p->s);
      else fail(line, name + " first arg must be str or a tuple of str, not " + type_name(*p));
      for (const auto& c : cands) {
        if (c.size() > s.size()) continue;
        if (name == "startswith" ? s.compare(0, c.size(), c) == 0 : s.compare(s.size() - c.size(), c.size(), c) == 0)
          return Value::boolean(true);
      }
      return Value::boolean(false);
    }
    if (name == "replace") {
      const Value *x = arg(0, "old"), *y = arg(1, "new"), *c = arg(2, "count");
      if (!x || !y) fail(line, "replace() takes at least 2 arguments");
      return Value::string(
          replace_str(s, to_str(*x), to_str(*y), c ? as_int(*c) : -1, limits_.max_output_bytes));
    }
    if (name == "find" || name == "rfind" || name == "index" || name == "count") {
      const Value* x = arg(0, "sub");
      if (!x) fail(line, name + "() takes at least 1 argument");
      std::string sub = to_str(*x);
      if (name == "count") {
        if (sub.empty()) return Value::integer(static_cast<int64_t>(tok::cp_count(s) + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value::integer(n);
      }
      size_t p = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (p == std::string::npos) {
        if (name == "index") fail(line, "substring not found");
        return Value::integer(-1);
      }
      return Value::integer(static_cast<int64_t>(tok::cp_count(std::string_view(s).substr(0, p))));
    }
    if (name == "join") {
      const Value* x = arg(0, "iterable");
      if (!x) fail(line, "join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const auto& it : iterate(*x, line)) {
        if (!first) out += s;
        first = false;
        out += to_str(it);
        if (out.size() > limits_.max_output_bytes) fail(line, "string too large");
      }
      return Value::string(out);
    }
    if (name == "removeprefix" || name == "removesuffix") {
      const Value* x = arg(0, "prefix");
      std::string p = x ? to_str(*x) : "";
      if (name == "removeprefix" && s.compare(0, p.size(), p) == 0) return Value::string(s.substr(p.size()));
      if (name == "removesuffix" && s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0)
        return Value::string(s.substr(0, s.size() - p.size()));
      return obj;
    }
    auto all_of = [&](auto pred) {
      if (s.empty()) return Value::boolean(false);
      for (size_t i = 0; i < s.size();) if (!pred(tok::next_cp(s, i))) return Value::boolean(false);
      return Value::boolean(true);
    };
    if (name == "isdigit") return all_of([](char32_t c) { return tok::is_numeric(c); });
    if (name == "isspace") return all_of(py_space);
    if (name == "isalnum") return all_of([](char32_t c) { return tok::is_alnum(c); });
    if (name == "isalpha") return all_of([](char32_t c) { return tok::is_alnum(c) && !tok::is_numeric(c); });
    if (name == "isupper") return Value::boolean(tok::to_upper(s) == s && tok::to_lower(s) != s);
    if (name == "islower") return Value::boolean(tok::to_lower(s) == s && tok::to_upper(s) != s);
    if (name == "format") {
      std::string out;
      size_t ai = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '{' && k + 1 < s.size() && s[k + 1] == '}') {
          if (ai < a.pos.size()) out += to_str(a.pos[ai++]);
          ++k;
        } else {
          out += s[k];
        }
      }
      return Value::string(out);
    }
    fail(line, "'str object' has no attribute '" + name + "'");
  }
  if (obj.kind == Kind::kDict) {
    if (name == "items") {
      std::vector<Value> items;
      for (const auto& [k, v] : obj.dict->items) items.push_back(Value::make_list({Value::string(k), v}, true));
      return Value::make_list(std::move(items));
    }
    if (name == "keys") {
      std::vector<Value> items;
      for (const auto& [k, v] : obj.dict->items) items.push_back(Value::string(k));
      return Value::make_list(std::move(items));
    }
    if (name == "values") {
      std::vector<Value> items;
      for (const auto& [k, v] : obj.dict->items) items.push_back(v);
      return Value::make_list(std::move(items));
    }
    if (name == "get") {
      const Value* k = arg(0, "key");
      if (!k) fail(line, "get expected at least 1 argument");
      const Value* v = obj.dict->find(k->is_string() ? k->s : to_str(*k));
      if (v) return *v;
      const Value* d = arg(1, "default");
      return d ? *d : Value::none();
    }
  }
  if (obj.kind == Kind::kList) {
    if (name == "index" || name == "count") {
      const Value* x = arg(0, "value");
      if (!x) fail(line, name + "() takes exactly one argument");
      int64_t n = 0;
      for (size_t k = 0; k < obj.list->items.size(); ++k) {
        if (values_equal(obj.list->items[k], *x)) {
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
      }
      if (name == "index") fail(line, to_str(*x) + " is not in list");
      return Value::integer(n);
    }
  }
  static const char* const kUnsafe[] = {"append", "pop", "extend", "insert", "remove", "sort", "reverse", "clear",
                                        "update", "popitem", "setdefault", "add", "discard"};
  for (const char* u : kUnsafe) {
    if (name == u) fail(line, "access to attribute '" + name + "' of '" + type_name(obj) + "' object is unsafe.");
  }
  fail(line, "'" + type_name(obj) + " object' has no attribute '" + name + "'");
}

bool Interpreter::compare(const std::string& op, const Value& a, const Value& b, int line) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in" || op == "not in") {
    bool r = false;
    if (b.is_string()) {
      if (!a.is_string()) fail(line, "'in <string>' requires string as left operand, not " + type_name(a));
      r = b.s.find(a.s) != std::string::npos;
    } else if (b.is_list()) {
      for (const auto& x : b.list->items) if (values_equal(a, x)) { r = true; break; }
    } else if (b.kind == Kind::kDict || b.kind == Kind::kNamespace) {
      r = a.is_string() && b.dict->find(a.s) != nullptr;
    } else if (b.is_undefined()) {
      r = false;
    } else {
      fail(line, "argument of type '" + type_name(b) + "' is not iterable");
    }
    return op == "in" ? r : !r;
  }
  int c;
  if (a.is_number() && b.is_number()) {
    double x = a.as_double(), y = b.as_double();
    if (is_int_like(a) && is_int_like(b)) c = as_int(a) < as_int(b) ? -1 : as_int(a) > as_int(b);
    else c = x < y ? -1 : x > y;
  } else if (a.is_string() && b.is_string()) {
    c = a.s.compare(b.s);
    c = c < 0 ? -1 : c > 0;
  } else if (a.is_list() && b.is_list()) {
    size_t n = std::min(a.list->items.size(), b.list->items.size());
    c = 0;
    for (size_t k = 0; k < n && c == 0; ++k) {
      if (values_equal(a.list->items[k], b.list->items[k])) continue;
      c = compare("<", a.list->items[k], b.list->items[k], line) ? -1 : 1;
    }
    if (c == 0) c = a.list->items.size() < b.list->items.size() ? -1 : a.list->items.size() > b.list->items.size();
  } else {
    require_defined(a, line);
    require_defined(b, line);
    fail(line, "'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
  }
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

Value Interpreter::binary(const std::string& op, const Value& a, const Value& b, int line) {
  require_defined(a, line);
  require_defined(b, line);
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.s.size() + b.s.size() > limits_.max_output_bytes) fail(line, "string too large");
      return Value::string(a.s + b.s);
    }
    if (a.is_list() && b.is_list()) {
      check_size(a.list->items.size() + b.list->items.size(), line);
      std::vector<Value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return Value::make_list(std::move(items), a.list->is_tuple);
    }
  }
  if (op == "*") {
    const Value* seq = a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* cnt = seq == &a ? &b : &a;
    if (seq && is_int_like(*cnt)) {
      int64_t n = std::max<int64_t>(0, as_int(*cnt));
      // An empty sequence repeats to an empty one at once: the size limits below pass it for
      // any count, and looping a huge count over nothing would spin (fuzz_chat_template).
      const bool empty = seq->is_string() ? seq->s.empty() : seq->list->items.empty();
      if (empty) n = 0;
      if (seq->is_string()) {
        if (static_cast<double>(seq->s.size()) * n > limits_.max_output_bytes) fail(line, "string too large");
        std::string r;
        for (int64_t k = 0; k < n; ++k) r += seq->s;
        return Value::string(r);
      }
      if (static_cast<double>(seq->list->items.size()) * static_cast<double>(n) >
          static_cast<double>(limits_.max_items))
        fail(line, "value too large (more than " + std::to_string(limits_.max_items) + " items)");
      std::vector<Value> items;
      for (int64_t k = 0; k < n; ++k) items.insert(items.end(), seq->list->items.begin(), seq->list->items.end());
      return Value::make_list(std::move(items), seq->list->is_tuple);
    }
  }
  if (op == "%" && a.is_string()) {
    // printf-style formatting with %s / %d / %%.
    std::vector<Value> vals = b.is_list() && b.list->is_tuple ? b.list->items : std::vector<Value>{b};
    std::string out;
    size_t vi = 0;
    for (size_t k = 0; k < a.s.size(); ++k) {
      if (a.s[k] != '%' || k + 1 >= a.s.size()) {
        out += a.s[k];
        continue;
      }
      char f = a.s[++k];
      if (f == '%') { out += '%'; continue; }
      if (vi >= vals.size()) fail(line, "not enough arguments for format string");
      const Value& v = vals[vi++];
      if (f == 'd' || f == 'i') out += std::to_string(v.kind == Kind::kFloat ? float_to_int(v.f) : as_int(v));
      else if (f == 'r') out += repr(v);
      else out += to_str(v);
    }
    return Value::string(out);
  }
  if (!a.is_number() || !b.is_number())
    fail(line, "unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  bool ints = is_int_like(a) && is_int_like(b);
  if (op == "/") {
    if (b.as_double() == 0) fail(line, "division by zero");
    return Value::real(a.as_double() / b.as_double());
  }
  if (ints) {
    // Python integers are unbounded; ours are 64-bit, so a result outside int64 is an error
    // rather than a wrapped value (or SIGFPE, for INT64_MIN // -1).
    int64_t x = as_int(a), y = as_int(b), r = 0;
    auto overflow = [&]() {
      fail(line, "integer overflow in " + std::to_string(x) + " " + op + " " + std::to_string(y));
    };
    if (op == "+")
      return __builtin_add_overflow(x, y, &r) ? (overflow(), Value()) : Value::integer(r);
    if (op == "-")
      return __builtin_sub_overflow(x, y, &r) ? (overflow(), Value()) : Value::integer(r);
    if (op == "*")
      return __builtin_mul_overflow(x, y, &r) ? (overflow(), Value()) : Value::integer(r);
    if (op == "//" || op == "%") {
      if (y == 0) fail(line, "integer division or modulo by zero");
      if (y == -1) {
        if (op == "%") return Value::integer(0);
        if (x == std::numeric_limits<int64_t>::min()) overflow();
        return Value::integer(-x);
      }
      int64_t q = floordiv(x, y);
      return Value::integer(op == "//" ? q : x - q * y);
    }
    if (op == "**") {
      if (y < 0) return Value::real(std::pow(static_cast<double>(x), static_cast<double>(y)));
      int64_t p = 1;
      for (int64_t k = 0; k < y; ++k) {
        if (__builtin_mul_overflow(p, x, &p)) overflow();
        if (p == 0 || p == 1) break;                   // 0 ** y, 1 ** y
        if (p == -1 && ((y - k - 1) % 2 == 0)) break;  // (-1) ** y: the sign is settled
      }
      return Value::integer(p);
    }
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::real(x + y);
  if (op == "-") return Value::real(x - y);
  if (op == "*") return Value::real(x * y);
  if (op == "//" || op == "%") {
    if (y == 0) fail(line, "float division by zero");
    double q = std::floor(x / y);
    return Value::real(op == "//" ? q : x - q * y);
  }
  if (op == "**") return Value::real(std::pow(x, y));
  fail(line, "unknown operator " + op);
}

Value Interpreter::eval(const Expr& e) {
  if (++nesting_ > limits_.max_nesting) {
    --nesting_;
    fail(e.line, "evaluation nests deeper than " + std::to_string(limits_.max_nesting) + " levels");
  }
  struct Unnest {
    int& n;
    ~Unnest() { --n; }
  } unnest{nesting_};
  step(e.line);
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: {
      const Value* v = lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case ExprKind::kList: case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.items.size());
      for (const auto& x : e.items) items.push_back(eval(*x));
      return Value::make_list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t k = 0; k < e.items.size(); ++k) {
        Value key = eval(*e.items[k]);
        d->set(key.is_string() ? key.s : to_str(key), eval(*e.values[k]));
      }
      return Value::make_dict(std::move(d));
    }
    case ExprKind::kGetAttr: return get_attr(eval(*e.a), e.name, e.line);
    case ExprKind::kGetItem: return get_item(eval(*e.a), eval(*e.b), e.line);
    case ExprKind::kSlice: {
      Value obj = eval(*e.a);
      require_defined(obj, e.line);
      auto opt = [&](const ExprPtr& p) -> std::optional<int64_t> {
        if (!p) return std::nullopt;
        Value v = eval(*p);
        if (v.is_none()) return std::nullopt;
        if (!is_int_like(v)) fail(e.line, "slice indices must be integers or None");
        return as_int(v);
      };
      auto lo = opt(e.b), hi = opt(e.c), st = opt(e.d);
      int64_t step_v = st.value_or(1);
      if (step_v == 0) fail(e.line, "slice step cannot be zero");
      std::u32string u;
      size_t n;
      if (obj.is_string()) {
        u = tok::to_u32(obj.s);
        n = u.size();
      } else if (obj.is_list()) {
        n = obj.list->items.size();
      } else {
        fail(e.line, "'" + type_name(obj) + "' object is not subscriptable");
      }
      auto clamp = [&](std::optional<int64_t> v, int64_t def, bool upper) {
        if (!v) return def;
        int64_t x = *v;
        if (x < 0) x += static_cast<int64_t>(n);
        if (step_v > 0) return std::clamp<int64_t>(x, 0, static_cast<int64_t>(n));
        return std::clamp<int64_t>(x, -1, static_cast<int64_t>(n) - 1);
        (void)upper;
      };
      int64_t b, en;
      if (step_v > 0) {
        b = clamp(lo, 0, false);
        en = clamp(hi, static_cast<int64_t>(n), true);
      } else {
        b = clamp(lo, static_cast<int64_t>(n) - 1, false);
        en = clamp(hi, -1, true);
      }
      std::vector<size_t> idx;
      for (int64_t k = b; step_v > 0 ? k < en : k > en; k += step_v) idx.push_back(static_cast<size_t>(k));
      if (obj.is_string()) {
        std::u32string r;
        for (size_t k : idx) r += u[k];
        return Value::string(tok::from_u32(r));
      }
      std::vector<Value> items;
      for (size_t k : idx) items.push_back(obj.list->items[k]);
      return Value::make_list(std::move(items), obj.list->is_tuple);
    }
    case ExprKind::kCall: {
      if (e.a->kind == ExprKind::kGetAttr) {
        Value obj = eval(*e.a->a);
        require_defined(obj, e.line);
        Args a = eval_args(e.call, e.line);
        if ((obj.kind == Kind::kDict || obj.kind == Kind::kNamespace)) {
          const Value* member = obj.dict->find(e.a->name);
          bool method = obj.kind == Kind::kDict &&
                        (e.a->name == "items" || e.a->name == "keys" || e.a->name == "values" || e.a->name == "get");
          if (!method) {
            if (member) return call(*member, a, e.line);
            fail(e.line, "'" + std::string(obj.kind == Kind::kDict ? "dict object" : "Namespace") +
                             "' has no attribute '" + e.a->name + "'");
          }
        }
        return call_method(obj, e.a->name, a, e.line);
      }
      Value fn = eval(*e.a);
      Args a = eval_args(e.call, e.line);
      return call(fn, a, e.line);
    }
    case ExprKind::kFilter: {
      Value v = eval(*e.a);
      Args a = eval_args(e.call, e.line);
      return apply_filter(e.name, v, a, e.line);
    }
    case ExprKind::kTest: {
      Value v = eval(*e.a);
      Args a = eval_args(e.call, e.line);
      bool r = apply_test(e.name, v, a, e.line);
      return Value::boolean(e.negated ? !r : r);
    }
    case ExprKind::kUnary: {
      Value v = eval(*e.a);
      require_defined(v, e.line);
      if (!v.is_number()) fail(e.line, "bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
      if (e.name == "+") return v.kind == Kind::kBool ? Value::integer(v.b) : v;
      if (v.kind == Kind::kFloat) return Value::real(-v.f);
      if (as_int(v) == std::numeric_limits<int64_t>::min())
        fail(e.line, "integer overflow in unary -");
      return Value::integer(-as_int(v));
    }
    case ExprKind::kBinary: return binary(e.name, eval(*e.a), eval(*e.b), e.line);
    case ExprKind::kCompare: {
      Value left = eval(*e.items[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.items[k + 1]);
        if (!compare(e.ops[k], left, right, e.line)) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case ExprKind::kAnd: {
      Value l = eval(*e.a);
      return l.truthy() ? eval(*e.b) : l;
    }
    case ExprKind::kOr: {
      Value l = eval(*e.a);
      return l.truthy() ? l : eval(*e.b);
    }
    case ExprKind::kNot: return Value::boolean(!eval(*e.a).truthy());
    case ExprKind::kCond:
      if (eval(*e.b).truthy()) return eval(*e.a);
      return e.c ? eval(*e.c) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& x : e.items) {
        s += to_str(eval(*x));
        if (s.size() > limits_.max_output_bytes) fail(e.line, "string too large");
      }
      return Value::string(s);
    }
  }
  return Value::undefined();
}

bool Interpreter::apply_test(const std::string& name, const Value& v, Args& a, int line) {
  const Value* x = a.get(0, nullptr);
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind == Kind::kBool;
  if (name == "true") return v.kind == Kind::kBool && v.b;
  if (name == "false") return v.kind == Kind::kBool && !v.b;
  if (name == "integer") return v.kind == Kind::kInt;
  if (name == "float") return v.kind == Kind::kFloat;
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.kind == Kind::kDict;
  if (name == "iterable") return v.is_string() || v.is_list() || v.kind == Kind::kDict;
  if (name == "sequence") return v.is_string() || v.is_list() || v.kind == Kind::kDict;
  if (name == "callable") return v.kind == Kind::kCallable;
  if (name == "escaped") return false;
  if (name == "even" || name == "odd") {
    if (!is_int_like(v)) fail(line, "test '" + name + "' needs an integer, got " + type_name(v));
    return (as_int(v) % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    if (!x || !is_int_like(*x) || !is_int_like(v)) fail(line, "test 'divisibleby' needs integers");
    if (as_int(*x) == 0) fail(line, "integer division or modulo by zero");
    return as_int(v) % as_int(*x) == 0;
  }
  if (name == "lower") return v.is_string() && tok::to_lower(v.s) == v.s;
  if (name == "upper") return v.is_string() && tok::to_upper(v.s) == v.s;
  auto need = [&] {
    if (!x) fail(line, "test '" + name + "' needs an argument");
    return *x;
  };
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, need());
  if (name == "ne" || name == "!=") return !values_equal(v, need());
  if (name == "lt" || name == "lessthan" || name == "<") return compare("<", v, need(), line);
  if (name == "le" || name == "<=") return compare("<=", v, need(), line);
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(">", v, need(), line);
  if (name == "ge" || name == ">=") return compare(">=", v, need(), line);
  if (name == "in") return compare("in", v, need(), line);
  if (name == "sameas") {
    Value o = need();
    if (v.kind != o.kind) return false;
    if (v.is_none() || v.kind == Kind::kBool) return values_equal(v, o);
    if (v.is_list()) return v.list == o.list;
    if (v.kind == Kind::kDict || v.kind == Kind::kNamespace) return v.dict == o.dict;
    return values_equal(v, o);
  }
  fail(line, "no test named '" + name + "'");
}

Value Interpreter::apply_filter(const std::string& name, const Value& v, Args& a, int line) {
  auto arg = [&](size_t i, const char* n) { return a.get(i, n); };
  auto attr_path = [&](const Value& item, const std::string& path) {
    Value cur = item;
    size_t b = 0;
    while (true) {
      size_t dot = path.find('.', b);
      std::string part = path.substr(b, dot == std::string::npos ? std::string::npos : dot - b);
      bool digits = !part.empty() && part.size() < 19 && std::all_of(part.begin(), part.end(), ::isdigit);
      cur = digits ? get_item(cur, Value::integer(std::stoll(part)), line) : get_item(cur, Value::string(part), line);
      if (dot == std::string::npos) return cur;
      b = dot + 1;
    }
  };
  if (name == "tojson") {
    JsonOptions o;
    if (const Value* x = arg(0, "ensure_ascii")) o.ensure_ascii = x->truthy();
    if (const Value* x = arg(1, "indent"); x && !x->is_none()) {
      if (x->is_string()) {
        o.indent = 1;
        o.indent_str = x->s;
        if (o.indent_str.size() > limits_.max_output_bytes)
          fail(line, "tojson: indent string too large");
      } else {
        const size_t width = width_arg(*x, "tojson indent", line);
        o.indent = static_cast<int>(std::min<size_t>(width, 1u << 20));
        o.indent_str = std::string(width, ' ');
      }
      o.item_sep = ",";
    }
    if (const Value* x = arg(2, "separators"); x && x->is_list() && x->list->items.size() == 2) {
      o.item_sep = x->list->items[0].s;
      o.key_sep = x->list->items[1].s;
    }
    if (const Value* x = arg(3, "sort_keys")) o.sort_keys = x->truthy();
    o.max_bytes = limits_.max_output_bytes;
    try {
      return Value::string(to_json(v, o));
    } catch (const Error& err) {
      fail(line, std::string("tojson: ") + err.what());
    }
  }
  if (name == "trim") {
    return Value::string(py_strip(to_str(v), arg(0, "chars"), true, true));
  }
  if (name == "length" || name == "count") {
    if (v.is_undefined()) return Value::integer(0);
    if (v.is_string()) return Value::integer(static_cast<int64_t>(tok::cp_count(v.s)));
    if (v.is_list()) return Value::integer(static_cast<int64_t>(v.list->items.size()));
    if (v.kind == Kind::kDict) return Value::integer(static_cast<int64_t>(v.dict->items.size()));
    fail(line, "object of type '" + type_name(v) + "' has no len()");
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::make_list({});
    if (v.kind != Kind::kDict) fail(line, "items filter needs a mapping, got " + type_name(v));
    Args none;
    return call_method(v, "items", none, line);
  }
  if (name == "string") return Value::string(to_str(v));
  if (name == "safe") return v;
  if (name == "e" || name == "escape" || name == "forceescape") return Value::string(html_escape(to_str(v)));
  if (name == "upper") return Value::string(tok::to_upper(to_str(v)));
  if (name == "lower") return Value::string(tok::to_lower(to_str(v)));
  if (name == "title") return Value::string(jinja_title(to_str(v)));
  if (name == "capitalize") return Value::string(py_capitalize(to_str(v)));
  if (name == "pprint") return Value::string(repr(v));
  if (name == "default" || name == "d") {
    const Value* def = arg(0, "default_value");
    const Value* boolean = arg(1, "boolean");
    bool use = v.is_undefined() || (boolean && boolean->truthy() && !v.truthy());
    if (use) return def ? *def : Value::string("");
    return v;
  }
  if (name == "replace") {
    const Value *x = arg(0, "old"), *y = arg(1, "new"), *c = arg(2, "count");
    if (!x || !y) fail(line, "replace filter needs old and new");
    return Value::string(replace_str(to_str(v), to_str(*x), to_str(*y),
                                     c && !c->is_none() ? as_int(*c) : -1,
                                     limits_.max_output_bytes));
  }
  if (name == "indent") {
    const Value *w = arg(0, "width"), *first = arg(1, "first"), *blank = arg(2, "blank");
    std::string ind =
        w ? (w->is_string() ? w->s : std::string(width_arg(*w, "indent", line), ' ')) : "    ";
    std::string s = to_str(v) + "\n";
    const double lines_n = static_cast<double>(std::count(s.begin(), s.end(), '\n'));
    if (static_cast<double>(s.size()) + lines_n * static_cast<double>(ind.size()) >
        static_cast<double>(limits_.max_output_bytes))
      fail(line, "indent: the result exceeds the output limit of " +
                     std::to_string(limits_.max_output_bytes) + " bytes");
    std::vector<std::string> lines;
    {
      size_t last = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (s[k] == '\n') {
          lines.push_back(s.substr(last, k - last));
          last = k + 1;
        }
      }
    }
    std::string rv;
    if (blank && blank->truthy()) {
      for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
    } else {
      rv = lines.empty() ? "" : lines[0];
      for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind + lines[k]);
    }
    if (first && first->truthy()) rv = ind + rv;
    return Value::string(rv);
  }
  if (name == "join") {
    const Value* sep = arg(0, "d");
    const Value* at = arg(1, "attribute");
    std::string out;
    bool first = true;
    for (const auto& it : iterate(v, line)) {
      if (!first) out += sep ? to_str(*sep) : "";
      first = false;
      out += to_str(at ? attr_path(it, to_str(*at)) : it);
      if (out.size() > limits_.max_output_bytes) fail(line, "string too large");
    }
    return Value::string(out);
  }
  if (name == "first" || name == "last") {
    auto items = iterate(v, line);
    if (items.empty()) return Value::undefined("no first item, sequence was empty");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value::make_list(iterate(v, line));
  if (name == "reverse") {
    if (v.is_string()) {
      std::u32string u = tok::to_u32(v.s);
      std::reverse(u.begin(), u.end());
      return Value::string(tok::from_u32(u));
    }
    auto items = iterate(v, line);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "int") {
    const Value* def = arg(0, "default");
    Value d = def ? *def : Value::integer(0);
    if (v.kind == Kind::kInt || v.kind == Kind::kBool) return Value::integer(as_int(v));
    if (v.kind == Kind::kFloat) return Value::integer(float_to_int(v.f));
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string t = py_strip(v.s, nullptr, true, true);
        int64_t r = std::stoll(t, &used);
        if (used == t.size()) return Value::integer(r);
        double f = std::stod(t, &used);
        if (used == t.size() && f > -9223372036854775808.0 && f < 9223372036854775808.0)
          return Value::integer(static_cast<int64_t>(f));
      } catch (const std::exception&) {
      }
    }
    return d;
  }
  if (name == "float") {
    const Value* def = arg(0, "default");
    if (v.is_number()) return Value::real(v.as_double());
    if (v.is_string()) {
      try {
        size_t used = 0;
        std::string t = py_strip(v.s, nullptr, true, true);
        double f = std::stod(t, &used);
        if (used == t.size()) return Value::real(f);
      } catch (const std::exception&) {
      }
    }
    return def ? *def : Value::real(0.0);
  }
  if (name == "abs") {
    if (v.kind == Kind::kFloat) return Value::real(std::fabs(v.f));
    if (is_int_like(v)) return Value::integer(std::llabs(as_int(v)));
    fail(line, "bad operand type for abs(): '" + type_name(v) + "'");
  }
  if (name == "round") {
    const Value *p = arg(0, "precision"), *m = arg(1, "method");
    int prec = p ? static_cast<int>(as_int(*p)) : 0;
    std::string method = m ? to_str(*m) : "common";
    double x = v.as_double(), f = std::pow(10.0, prec);
    if (method == "ceil") return Value::real(std::ceil(x * f) / f);
    if (method == "floor") return Value::real(std::floor(x * f) / f);
    return Value::real(std::round(x * f) / f);
  }
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(py_split(to_str(v), nullptr, -1).size()));
  if (name == "center") {
    const Value* w = arg(0, "width");
    std::string s = to_str(v);
    size_t width = w ? width_arg(*w, "center", line) : 80, n = tok::cp_count(s);
    if (width <= n) return Value::string(s);
    size_t total = width - n, left = total / 2 + (total & width & 1);
    return Value::string(std::string(left, ' ') + s + std::string(total - left, ' '));
  }
  if (name == "truncate") {
    const Value *len = arg(0, "length"), *kill = arg(1, "killwords"), *end = arg(2, "end"), *leeway = arg(3, "leeway");
    size_t L = len ? static_cast<size_t>(as_int(*len)) : 255;
    std::string ending = end ? to_str(*end) : "...";
    size_t lw = leeway ? static_cast<size_t>(as_int(*leeway)) : 5;
    std::u32string u = tok::to_u32(to_str(v));
    size_t el = tok::cp_count(ending);
    if (u.size() <= L + lw) return Value::string(tok::from_u32(u));
    std::u32string cut = u.substr(0, L > el ? L - el : 0);
    if (!(kill && kill->truthy())) {
      size_t sp = cut.rfind(U' ');
      if (sp != std::u32string::npos) cut = cut.substr(0, sp);
    }
    return Value::string(tok::from_u32(cut) + ending);
  }
  if (name == "format") {
    Value fmt = v;
    Value vals = Value::make_list(a.pos, true);
    return binary("%", fmt, vals, line);
  }
  if (name == "attr") {
    const Value* n = arg(0, "name");
    if (!n) fail(line, "attr filter needs a name");
    return get_attr(v, to_str(*n), line);
  }
  if (name == "dictsort") {
    if (v.kind != Kind::kDict) fail(line, "dictsort needs a mapping");
    const Value *cs = arg(0, "case_sensitive"), *by = arg(1, "by"), *rev = arg(2, "reverse");
    bool sens = cs && cs->truthy(), by_value = by && to_str(*by) == "value";
    std::vector<Value> items;
    for (const auto& [k, x] : v.dict->items) items.push_back(Value::make_list({Value::string(k), x}, true));
    auto key = [&](const Value& it) {
      Value k = it.list->items[by_value ? 1 : 0];
      if (!sens && k.is_string()) k = Value::string(tok::to_lower(k.s));
      return k;
    };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return compare("<", key(x), key(y), line);
    });
    if (rev && rev->truthy()) std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    const Value* rev = name == "sort" ? arg(0, "reverse") : nullptr;
    const Value* cs = name == "sort" ? arg(1, "case_sensitive") : arg(0, "case_sensitive");
    const Value* at = name == "sort" ? arg(2, "attribute") : arg(1, "attribute");
    bool sens = cs && cs->truthy();
    auto items = iterate(v, line);
    auto key = [&](const Value& it) {
      Value k = at && !at->is_none() ? attr_path(it, to_str(*at)) : it;
      if (!sens && k.is_string()) k = Value::string(tok::to_lower(k.s));
      return k;
    };
    if (name == "unique") {
      std::vector<Value> out, seen;
      for (const auto& it : items) {
        Value k = key(it);
        bool dup = false;
        for (const auto& s : seen) if (values_equal(s, k)) { dup = true; break; }
        if (!dup) {
          seen.push_back(k);
          out.push_back(it);
        }
      }
      return Value::make_list(std::move(out));
    }
    if (name == "min" || name == "max") {
      if (items.empty()) return Value::undefined("no " + name + " item, sequence was empty");
      size_t best = 0;
      for (size_t k = 1; k < items.size(); ++k) {
        bool better = name == "min" ? compare("<", key(items[k]), key(items[best]), line)
                                    : compare(">", key(items[k]), key(items[best]), line);
        if (better) best = k;
      }
      return items[best];
    }
    bool r = rev && rev->truthy();
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return r ? compare("<", key(y), key(x), line) : compare("<", key(x), key(y), line);
    });
    return Value::make_list(std::move(items));
  }
  if (name == "sum") {
    const Value *at = arg(0, "attribute"), *start = arg(1, "start");
    Value acc = start ? *start : Value::integer(0);
    for (const auto& it : iterate(v, line)) acc = binary("+", acc, at && !at->is_none() ? attr_path(it, to_str(*at)) : it, line);
    return acc;
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    bool by_attr = name == "selectattr" || name == "rejectattr";
    bool want = name == "select" || name == "selectattr";
    size_t ti = by_attr ? 1 : 0;
    std::string attr = by_attr ? (a.pos.empty() ? "" : to_str(a.pos[0])) : "";
    std::string test = a.pos.size() > ti ? to_str(a.pos[ti]) : "";
    Args targs;
    targs.line = line;
    for (size_t k = ti + 1; k < a.pos.size(); ++k) targs.pos.push_back(a.pos[k]);
    std::vector<Value> out;
    for (const auto& it : iterate(v, line)) {
      Value x = by_attr ? attr_path(it, attr) : it;
      bool ok = test.empty() ? x.truthy() : apply_test(test, x, targs, line);
      if (ok == want) out.push_back(it);
    }
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    std::vector<Value> out;
    const Value* at = nullptr;
    for (const auto& [k, x] : a.kw) if (k == "attribute") at = &x;
    if (at) {
      const Value* def = nullptr;
      for (const auto& [k, x] : a.kw) if (k == "default") def = &x;
      for (const auto& it : iterate(v, line)) {
        Value r = attr_path(it, to_str(*at));
        out.push_back(r.is_undefined() && def ? *def : r);
      }
      return Value::make_list(std::move(out));
    }
    if (a.pos.empty()) fail(line, "map filter needs a filter name or attribute=");
    std::string f = to_str(a.pos[0]);
    Args fargs;
    fargs.line = line;
    fargs.pos.assign(a.pos.begin() + 1, a.pos.end());
    fargs.kw = a.kw;
    for (const auto& it : iterate(v, line)) out.push_back(apply_filter(f, it, fargs, line));
    return Value::make_list(std::move(out));
  }
  if (name == "batch") {
    const Value *n = arg(0, "linecount"), *fill = arg(1, "fill_with");
    int64_t c = n ? as_int(*n) : 1;
    if (c <= 0) fail(line, "batch size must be positive");
    std::vector<Value> out, cur;
    for (const auto& it : iterate(v, line)) {
      cur.push_back(it);
      if (static_cast<int64_t>(cur.size()) == c) {
        out.push_back(Value::make_list(std::move(cur)));
        cur.clear();
      }
    }
    if (!cur.empty()) {
      if (fill) while (static_cast<int64_t>(cur.size()) < c) cur.push_back(*fill);
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_list(std::move(out));
  }
  fail(line, "no filter named '" + name + "'");
}

}  // namespace mlxcel::jinja
