#include "tokenizer/jinja/parser.h"

#include <algorithm>
#include <set>

#include "core/error.h"
#include "tokenizer/jinja/lexer.h"

namespace mlxcel::jinja {

namespace {

// Templates come with model downloads, so they are untrusted input: the parser refuses nesting
// (statements, parentheses, operator chains) beyond these depths instead of building a tree
// whose evaluation or destruction would overflow the stack.
constexpr int kMaxNesting = 128;    // parser recursion: nested blocks, brackets, unary operators
constexpr int kMaxExprDepth = 256;  // height of one expression tree (a + b + ... is a chain)

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  Template parse_template() {
    Template tpl;
    tpl.body = parse_body({});
    if (peek().type != TokType::kEof) error("unexpected '" + peek_block_name() + "'");
    return tpl;
  }

 private:
  [[noreturn]] void error(const std::string& msg, int line = -1) const {
    throw_error(ErrorCategory::kBadInput, "chat template syntax error at line " +
                                              std::to_string(line < 0 ? peek().line : line) + ": " + msg);
  }
  const Token& peek(size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[std::min(p_++, t_.size() - 1)]; }
  bool is_op(const char* op, size_t k = 0) const { return peek(k).type == TokType::kOp && peek(k).text == op; }
  bool is_name(const char* n, size_t k = 0) const { return peek(k).type == TokType::kName && peek(k).text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) error(std::string("expected '") + op + "', got " + describe(peek()));
    ++p_;
  }
  void expect_name(const char* n) {
    if (!is_name(n)) error(std::string("expected '") + n + "', got " + describe(peek()));
    ++p_;
  }
  std::string expect_ident() {
    if (peek().type != TokType::kName) error("expected a name, got " + describe(peek()));
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != TokType::kBlockEnd) error("expected end of statement '%}', got " + describe(peek()));
    ++p_;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokType::kEof: return "end of template";
      case TokType::kBlockEnd: return "'%}'";
      case TokType::kVarEnd: return "'}}'";
      case TokType::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  std::string peek_block_name() const {
    if (peek().type == TokType::kBlockBegin && peek(1).type == TokType::kName) return "{% " + peek(1).text + " %}";
    return describe(peek());
  }

  // Parses statements until a block tag whose name is in `ends` (left unconsumed).
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tk = peek();
      if (tk.type == TokType::kEof) {
        if (!ends.empty()) {
          std::string want = *ends.begin();
          for (const auto& e : ends) if (e.rfind("end", 0) == 0) want = e;
          error("unexpected end of template, expected '{% " + want + " %}'");
        }
        return body;
      }
      if (tk.type == TokType::kData) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kData;
        s->line = tk.line;
        s->text = tk.text;
        body.push_back(std::move(s));
        ++p_;
      } else if (tk.type == TokType::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->line = tk.line;
        ++p_;
        s->expr = parse_expr();
        if (peek().type != TokType::kVarEnd) error("expected '}}', got " + describe(peek()));
        ++p_;
        body.push_back(std::move(s));
      } else if (tk.type == TokType::kBlockBegin) {
        if (peek(1).type != TokType::kName) error("expected a statement name after '{%'");
        const std::string& name = peek(1).text;
        if (ends.count(name)) return body;
        ++p_;
        body.push_back(parse_statement());
      } else {
        error("unexpected " + describe(tk));
      }
    }
  }

  StmtPtr parse_statement() {
    Nest nest(*this);
    const Token& nt = next();
    std::string name = nt.text;
    int line = nt.line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (name == "if") {
      s->kind = StmtKind::kIf;
      ExprPtr cond = parse_expr();
      expect_block_end();
      while (true) {
        Body b = parse_body({"elif", "else", "endif"});
        s->branches.emplace_back(std::move(cond), std::move(b));
        ++p_;  // block begin
        std::string kw = next().text;
        if (kw == "elif") {
          cond = parse_expr();
          expect_block_end();
        } else if (kw == "else") {
          expect_block_end();
          Body eb = parse_body({"endif"});
          s->branches.emplace_back(nullptr, std::move(eb));
          p_ += 2;
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (name == "for") {
      s->kind = StmtKind::kFor;
      s->targets.push_back(expect_ident());
      while (is_op(",")) {
        ++p_;
        s->targets.push_back(expect_ident());
      }
      expect_name("in");
      s->expr = parse_expr(/*no_cond=*/true);
      if (is_name("if")) {
        ++p_;
        s->loop_filter = parse_expr(true);
      }
      if (is_name("recursive")) error("recursive for loops are not supported");
      expect_block_end();
      s->body = parse_body({"else", "endfor"});
      ++p_;
      if (next().text == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"});
        p_ += 2;
      }
      expect_block_end();
    } else if (name == "set") {
      std::string first = expect_ident();
      if (is_op(".")) {
        ++p_;
        s->kind = StmtKind::kSet;
        s->targets.push_back(first);
        s->ns_attr = expect_ident();
        expect_op("=");
        s->expr = parse_tuple_expr();
        expect_block_end();
      } else {
        s->targets.push_back(first);
        while (is_op(",")) {
          ++p_;
          s->targets.push_back(expect_ident());
        }
        if (is_op("=")) {
          ++p_;
          s->kind = StmtKind::kSet;
          s->expr = parse_tuple_expr();
          expect_block_end();
        } else {
          if (s->targets.size() != 1) error("a block 'set' takes exactly one name");
          s->kind = StmtKind::kSetBlock;
          s->name = first;
          while (is_op("|")) {
            ++p_;
            s->filters.push_back(parse_filter_call(nullptr));
          }
          expect_block_end();
          s->body = parse_body({"endset"});
          p_ += 2;
          expect_block_end();
        }
      }
    } else if (name == "macro") {
      s->kind = StmtKind::kMacro;
      s->name = expect_ident();
      parse_params(s->params);
      expect_block_end();
      s->body = parse_body({"endmacro"});
      p_ += 2;
      if (peek().type == TokType::kName) ++p_;
      expect_block_end();
    } else if (name == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) parse_params(s->params);
      s->expr = parse_expr();
      if (s->expr->kind != ExprKind::kCall) error("'call' needs a macro call", line);
      expect_block_end();
      s->body = parse_body({"endcall"});
      p_ += 2;
      expect_block_end();
    } else if (name == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->filters.push_back(parse_filter_call(nullptr));
      while (is_op("|")) {
        ++p_;
        s->filters.push_back(parse_filter_call(nullptr));
      }
      expect_block_end();
      s->body = parse_body({"endfilter"});
      p_ += 2;
      expect_block_end();
    } else if (name == "break" || name == "continue") {
      s->kind = name == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      expect_block_end();
    } else if (name == "generation") {
      s->kind = StmtKind::kGeneration;
      expect_block_end();
      s->body = parse_body({"endgeneration"});
      p_ += 2;
      expect_block_end();
    } else if (name == "with") {
      s->kind = StmtKind::kWith;
      while (peek().type == TokType::kName) {
        std::string n = next().text;
        expect_op("=");
        s->assigns.emplace_back(n, parse_expr());
        if (is_op(",")) ++p_;
      }
      expect_block_end();
      s->body = parse_body({"endwith"});
      p_ += 2;
      expect_block_end();
    } else if (name == "include" || name == "import" || name == "from" || name == "extends" || name == "block") {
      error("'" + name + "' is not supported in chat templates (a chat template is a single file)", line);
    } else {
      error("encountered unknown tag '" + name + "'", line);
    }
    return s;
  }

  void parse_params(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      MacroParam mp;
      mp.name = expect_ident();
      if (is_op("=")) {
        ++p_;
        mp.def = parse_expr();
      }
      params.push_back(std::move(mp));
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }

  // Counts one level of parser recursion for as long as it lives.
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nesting_ > kMaxNesting) {
        --p.nesting_;
        p.error("the template nests deeper than " + std::to_string(kMaxNesting) + " levels");
      }
    }
    ~Nest() { --p.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;
  };

  // Records the height of `e` from its children; refuses trees taller than kMaxExprDepth.
  ExprPtr seal(ExprPtr e) {
    int h = 0;
    auto see = [&h](const ExprPtr& c) {
      if (c) h = std::max(h, c->depth);
    };
    see(e->a);
    see(e->b);
    see(e->c);
    see(e->d);
    for (const auto& c : e->items) see(c);
    for (const auto& c : e->values) see(c);
    for (const auto& c : e->call.args) see(c);
    for (const auto& kv : e->call.kwargs) see(kv.second);
    e->depth = h + 1;
    if (e->depth > kMaxExprDepth)
      error("an expression nests deeper than " + std::to_string(kMaxExprDepth) +
                " levels (a chain of that many operators?)",
            e->line);
    return e;
  }

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // A bare tuple "a, b" is allowed on the right of set.
  ExprPtr parse_tuple_expr() {
    int line = peek().line;
    ExprPtr first = parse_expr();
    if (!is_op(",")) return first;
    auto t = make(ExprKind::kTuple, line);
    t->items.push_back(std::move(first));
    while (is_op(",")) {
      ++p_;
      if (peek().type == TokType::kBlockEnd) break;
      t->items.push_back(parse_expr());
    }
    return seal(std::move(t));
  }

  ExprPtr parse_expr(bool no_cond = false) {
    Nest nest(*this);
    ExprPtr e = parse_or();
    while (!no_cond && is_name("if")) {
      int line = peek().line;
      ++p_;
      auto c = make(ExprKind::kCond, line);
      c->b = parse_or();
      c->a = std::move(e);
      if (is_name("else")) {
        ++p_;
        c->c = parse_expr();
      }
      e = seal(std::move(c));
    }
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      auto n = make(ExprKind::kOr, next().line);
      n->a = std::move(e);
      n->b = parse_and();
      e = seal(std::move(n));
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      auto n = make(ExprKind::kAnd, next().line);
      n->a = std::move(e);
      n->b = parse_not();
      e = seal(std::move(n));
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      auto n = make(ExprKind::kNot, next().line);
      n->a = parse_not();
      return seal(std::move(n));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = peek().line;
    ExprPtr e = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (peek().type == TokType::kOp &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        ++p_;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        p_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(ExprKind::kCompare, line);
        cmp->items.push_back(std::move(e));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
      if (cmp->items.size() > static_cast<size_t>(kMaxExprDepth))
        error("too many chained comparisons");
    }
    return cmp ? seal(std::move(cmp)) : std::move(e);
  }
  ExprPtr binary(std::string op, ExprPtr a, ExprPtr b, int line) {
    auto n = make(ExprKind::kBinary, line);
    n->name = std::move(op);
    n->a = std::move(a);
    n->b = std::move(b);
    return seal(std::move(n));
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.line);
    }
    return e;
  }
  ExprPtr parse_concat() {
    int line = peek().line;
    ExprPtr e = parse_math2();
    if (!is_op("~")) return e;
    auto n = make(ExprKind::kConcat, line);
    n->items.push_back(std::move(e));
    while (is_op("~")) {
      ++p_;
      n->items.push_back(parse_math2());
    }
    return seal(std::move(n));
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.line);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next();
      e = binary("**", std::move(e), parse_unary(true), t.line);
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      Nest nest(*this);
      const Token& t = next();
      e = make(ExprKind::kUnary, t.line);
      e->name = t.text;
      e->a = parse_unary(false);
      e = seal(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }
  ExprPtr parse_primary() {
    const Token& t = peek();
    int line = t.line;
    if (t.type == TokType::kName) {
      ++p_;
      auto e = make(ExprKind::kLiteral, line);
      if (t.text == "true" || t.text == "True") e->literal = Value::boolean(true);
      else if (t.text == "false" || t.text == "False") e->literal = Value::boolean(false);
      else if (t.text == "none" || t.text == "None") e->literal = Value::none();
      else {
        e->kind = ExprKind::kName;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == TokType::kString) {
      std::string s;
      while (peek().type == TokType::kString) s += next().text;
      auto e = make(ExprKind::kLiteral, line);
      e->literal = Value::string(std::move(s));
      return e;
    }
    if (t.type == TokType::kInt || t.type == TokType::kFloat) {
      ++p_;
      auto e = make(ExprKind::kLiteral, line);
      try {
        e->literal = t.type == TokType::kInt ? Value::integer(std::stoll(t.text)) : Value::real(std::stod(t.text));
      } catch (const std::exception&) {
        error("number literal '" + t.text + "' is out of range");
      }
      return e;
    }
    if (is_op("(")) {
      ++p_;
      if (is_op(")")) {
        ++p_;
        auto e = make(ExprKind::kTuple, line);
        return seal(std::move(e));
      }
      ExprPtr first = parse_expr();
      if (is_op(")")) {
        ++p_;
        return first;
      }
      auto e = make(ExprKind::kTuple, line);
      e->items.push_back(std::move(first));
      while (is_op(",")) {
        ++p_;
        if (is_op(")")) break;
        e->items.push_back(parse_expr());
      }
      expect_op(")");
      return seal(std::move(e));
    }
    if (is_op("[")) {
      ++p_;
      auto e = make(ExprKind::kList, line);
      while (!is_op("]")) {
        e->items.push_back(parse_expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return seal(std::move(e));
    }
    if (is_op("{")) {
      ++p_;
      auto e = make(ExprKind::kDict, line);
      while (!is_op("}")) {
        e->items.push_back(parse_expr());
        expect_op(":");
        e->values.push_back(parse_expr());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return seal(std::move(e));
    }
    error("unexpected " + describe(t));
  }
  void parse_call_args(CallArgs& ca) {
    expect_op("(");
    while (!is_op(")")) {
      if (peek().type == TokType::kName && is_op("=", 1)) {
        std::string n = next().text;
        ++p_;
        ca.kwargs.emplace_back(n, parse_expr());
      } else {
        if (!ca.kwargs.empty()) error("positional argument follows keyword argument");
        ca.args.push_back(parse_expr());
      }
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }
  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      int line = peek().line;
      if (is_op(".")) {
        ++p_;
        auto n = make(ExprKind::kGetAttr, line);
        if (peek().type == TokType::kInt) n->name = next().text;
        else n->name = expect_ident();
        n->a = std::move(e);
        e = seal(std::move(n));
      } else if (is_op("[")) {
        ++p_;
        ExprPtr lo, hi, step;
        bool slice = false;
        if (!is_op(":")) lo = parse_expr();
        if (is_op(":")) {
          slice = true;
          ++p_;
          if (!is_op("]") && !is_op(":")) hi = parse_expr();
          if (is_op(":")) {
            ++p_;
            if (!is_op("]")) step = parse_expr();
          }
        }
        expect_op("]");
        auto n = make(slice ? ExprKind::kSlice : ExprKind::kGetItem, line);
        n->a = std::move(e);
        n->b = std::move(lo);
        n->c = std::move(hi);
        n->d = std::move(step);
        e = seal(std::move(n));
      } else if (is_op("(")) {
        auto n = make(ExprKind::kCall, line);
        n->a = std::move(e);
        parse_call_args(n->call);
        e = seal(std::move(n));
      } else {
        return e;
      }
    }
  }
  ExprPtr parse_filter_call(ExprPtr operand) {
    int line = peek().line;
    auto n = make(ExprKind::kFilter, line);
    n->name = expect_ident();
    while (is_op(".")) {
      ++p_;
      n->name += "." + expect_ident();
    }
    if (is_op("(")) parse_call_args(n->call);
    n->a = std::move(operand);
    return seal(std::move(n));
  }
  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        ++p_;
        e = parse_filter_call(std::move(e));
      } else if (is_name("is")) {
        int line = next().line;
        auto n = make(ExprKind::kTest, line);
        if (is_name("not")) {
          ++p_;
          n->negated = true;
        }
        n->name = expect_ident();
        if (is_op("(")) {
          parse_call_args(n->call);
        } else if ((peek().type == TokType::kName || peek().type == TokType::kString ||
                    peek().type == TokType::kInt || peek().type == TokType::kFloat || is_op("[") ||
                    is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and") && !is_name("if") &&
                   !is_name("in") && !is_name("not")) {
          n->call.args.push_back(parse_postfix(parse_primary()));
        }
        n->a = std::move(e);
        e = seal(std::move(n));
      } else if (is_op("(")) {
        auto n = make(ExprKind::kCall, peek().line);
        n->a = std::move(e);
        parse_call_args(n->call);
        e = seal(std::move(n));
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  size_t p_ = 0;
  int nesting_ = 0;
};

}  // namespace

Template parse(const std::string& source) { return Parser(lex(source)).parse_template(); }

}  // namespace mlxcel::jinja
