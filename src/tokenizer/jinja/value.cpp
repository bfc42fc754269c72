#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace mlxcel::jinja {

const Value* Dict::find(const std::string& k) const {
  auto it = index.find(k);
  return it == index.end() ? nullptr : &items[it->second].second;
}

void Dict::set(const std::string& k, Value v) {
  auto it = index.find(k);
  if (it != index.end()) {
    items[it->second].second = std::move(v);
    return;
  }
  index[k] = items.size();
  items.emplace_back(k, std::move(v));
}

Value Value::make_list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = tuple;
  v.list = std::move(l);
  return v;
}

Value Value::make_dict(std::shared_ptr<Dict> d) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::move(d);
  return v;
}

Value Value::make_namespace(std::shared_ptr<Dict> d) {
  Value v;
  v.kind = Kind::kNamespace;
  v.dict = std::move(d);
  return v;
}

Value Value::callable(std::string name, NativeFn fn) {
  Value v;
  v.kind = Kind::kCallable;
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  v.fn = std::move(c);
  return v;
}

bool Value::truthy() const {
  switch (kind) {
    case Kind::kUndefined: case Kind::kNone: return false;
    case Kind::kBool: return b;
    case Kind::kInt: return i != 0;
    case Kind::kFloat: return f != 0;
    case Kind::kString: return !s.empty();
    case Kind::kList: return !list->items.empty();
    case Kind::kDict: return !dict->items.empty();
    case Kind::kNamespace: case Kind::kCallable: return true;
  }
  return false;
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return v.list->is_tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "object";
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci is like "-1.2345e+02": split digits and exponent.
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  auto epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant) if (c != '.') digits += c;
  std::string out;
  if (exp >= -5 + 1 && exp < 16) {
    // Python repr switches to exponent form for exp < -4 or exp >= 16.
    if (exp >= 0) {
      if (static_cast<int>(digits.size()) <= exp + 1) {
        out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
      } else {
        out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
      }
    } else {
      out = "0." + std::string(-exp - 1, '0') + digits;
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  }
  return neg ? "-" + out : out;
}

static bool py_printable(char32_t c) {
  // Python's str.isprintable: not Cc, Cf, Cs, Co, Cn, Zl, Zp, Zs (except ASCII space).
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c >= 0x80 && c < 0xA0) return false;
  if (c == 0xA0 || c == 0xAD) return false;
  if (c == 0x2028 || c == 0x2029) return false;
  if ((c >= 0x2000 && c <= 0x200F) || (c >= 0x202A && c <= 0x202F) || (c >= 0x205F && c <= 0x206F)) return false;
  if (c == 0x1680 || c == 0x3000 || c == 0xFEFF) return false;
  return true;
}

std::string py_repr_string(std::string_view s) {
  bool has_sq = s.find('\'') != std::string_view::npos, has_dq = s.find('"') != std::string_view::npos;
  char q = has_sq && !has_dq ? '"' : '\'';
  std::string out(1, q);
  for (size_t i = 0; i < s.size();) {
    char32_t c = tok::next_cp(s, i);
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (!py_printable(c)) {
      char buf[16];
      if (c < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
      out += buf;
    } else {
      tok::append_utf8(out, c);
    }
  }
  out += q;
  return out;
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Kind::kString: return py_repr_string(v.s);
    case Kind::kList: {
      std::string out = v.list->is_tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += ", ";
        out += repr(v.list->items[k]);
      }
      if (v.list->is_tuple && v.list->items.size() == 1) out += ",";
      return out + (v.list->is_tuple ? ")" : "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += py_repr_string(k) + ": " + repr(x);
      }
      return out + "}";
    }
    default: return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.b ? "True" : "False";
    case Kind::kInt: return std::to_string(v.i);
    case Kind::kFloat: return py_float_repr(v.f);
    case Kind::kString: return v.s;
    case Kind::kList: case Kind::kDict: return repr(v);
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kCallable: return "<function " + v.fn->name + ">";
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind != Kind::kFloat && b.kind != Kind::kFloat) {
      int64_t x = a.kind == Kind::kBool ? a.b : a.i, y = b.kind == Kind::kBool ? b.b : b.i;
      return x == y;
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Kind::kUndefined: case Kind::kNone: return true;
    case Kind::kString: return a.s == b.s;
    case Kind::kList: {
      if (a.list->items.size() != b.list->items.size()) return false;
      for (size_t k = 0; k < a.list->items.size(); ++k)
        if (!values_equal(a.list->items[k], b.list->items[k])) return false;
      return true;
    }
    case Kind::kDict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, x] : a.dict->items) {
        const Value* y = b.dict->find(k);
        if (!y || !values_equal(x, *y)) return false;
      }
      return true;
    }
    default: return a.dict == b.dict && a.fn == b.fn;
  }
}

static void json_string(std::string& out, std::string_view s, bool ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    char32_t c = tok::next_cp(s, i);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char buf[16];
        if (c < 0x20 || (ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            char32_t v = c - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                          static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          tok::append_utf8(out, c);
        }
      }
    }
  }
  out += '"';
}

static void json_rec(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > o.max_depth)
    throw_error(ErrorCategory::kBadInput,
                "value nests deeper than " + std::to_string(o.max_depth) + " levels");
  auto nl = [&](int d) {
    if (o.indent < 0) return;
    if (out.size() + 1 + static_cast<size_t>(d) * o.indent_str.size() > o.max_bytes)
      throw_error(ErrorCategory::kBadInput,
                  "output exceeds " + std::to_string(o.max_bytes) + " bytes");
    out += '\n';
    for (int k = 0; k < d; ++k) out += o.indent_str;
  };
  if (out.size() > o.max_bytes)
    throw_error(ErrorCategory::kBadInput,
                "output exceeds " + std::to_string(o.max_bytes) + " bytes");
  switch (v.kind) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.b ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.i); return;
    case Kind::kFloat:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += py_float_repr(v.f);
      return;
    case Kind::kString: json_string(out, v.s, o.ensure_ascii); return;
    case Kind::kList: {
      if (v.list->items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += o.item_sep;
        nl(depth + 1);
        json_rec(out, v.list->items[k], o, depth + 1);
      }
      nl(depth);
      out += ']';
      return;
    }
    case Kind::kDict: case Kind::kNamespace: {
      if (v.kind == Kind::kNamespace) {
        throw_error(ErrorCategory::kBadInput, "Object of type Namespace is not JSON serializable");
      }
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& it : v.dict->items) items.push_back(&it);
      if (o.sort_keys)
        std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      for (size_t k = 0; k < items.size(); ++k) {
        if (k) out += o.item_sep;
        nl(depth + 1);
        json_string(out, items[k]->first, o.ensure_ascii);
        out += o.key_sep;
        json_rec(out, items[k]->second, o, depth + 1);
      }
      nl(depth);
      out += '}';
      return;
    }
    case Kind::kUndefined:
      throw_error(ErrorCategory::kBadInput, "Object of type Undefined is not JSON serializable");
    case Kind::kCallable:
      throw_error(ErrorCategory::kBadInput, "Object of type function is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonOptions& o) {
  std::string out;
  json_rec(out, v, o, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j, int max_depth) {
  if (max_depth < 0)
    throw_error(ErrorCategory::kBadInput,
                "a template variable nests too deeply (more than 512 levels of lists and objects)");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value::integer(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value::real(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, max_depth - 1));
      return Value::make_list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it)
        d->set(it.key(), from_json(it.value(), max_depth - 1));
      return Value::make_dict(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace mlxcel::jinja
