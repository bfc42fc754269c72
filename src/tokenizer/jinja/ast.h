#pragma once
// Syntax tree of a Jinja template.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace mlxcel::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind : std::uint8_t {
  kLiteral, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kUnary, kBinary, kCompare, kAnd, kOr, kNot, kCond, kConcat
};

struct CallArgs {
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

struct Expr {
  ExprKind kind;
  int line = 0;
  Value literal;                 // kLiteral
  std::string name;              // kName, kGetAttr attr, filter/test name, operator
  ExprPtr a, b, c;               // operands (object, index, ...); kSlice: a[b:c:d]
  ExprPtr d;
  std::vector<ExprPtr> items;    // list/tuple items, dict keys; compare operands; concat parts
  std::vector<ExprPtr> values;   // dict values
  std::vector<std::string> ops;  // compare operators
  CallArgs call;                 // kCall, kFilter, kTest arguments
  bool negated = false;          // kTest "is not"
  int depth = 1;                 // height of this subtree (the parser caps it)
};

enum class StmtKind : std::uint8_t {
  kData, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue,
  kGeneration, kWith
};

struct MacroParam {
  std::string name;
  ExprPtr def;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                       // kData
  ExprPtr expr;                           // output / if cond / for iter / set value / filter call
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (cond, body)...; else has null cond
  std::vector<std::string> targets;       // for / set names (tuple unpacking)
  std::string ns_attr;                    // set ns.attr: targets[0] = ns
  ExprPtr loop_filter;                    // for ... if cond
  Body body, else_body;
  std::string name;                       // macro name / set-block target
  std::vector<MacroParam> params;         // macro / call-block params
  std::vector<ExprPtr> filters;           // set-block / filter-block filter chain (kFilter exprs)
  std::vector<std::pair<std::string, ExprPtr>> assigns;  // kWith
};

struct Template {
  Body body;
};

}  // namespace mlxcel::jinja
