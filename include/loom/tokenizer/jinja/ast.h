// The parsed form of a template: expression and statement nodes. Each node
// keeps the byte offset it came from so errors can name a line and column.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/tokenizer/jinja/value.h"

namespace loom::jinja {

enum class ExprType {
  kConst, kName, kList, kTuple, kDict, kGetAttr, kGetItem, kSlice, kCall, kFilter, kTest,
  kNot, kNeg, kPos, kBinary, kAnd, kOr, kCompare, kConditional,
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct Expr {
  ExprType type;
  size_t offset = 0;
  Value value;                // kConst
  std::string name;           // kName, kGetAttr attribute, kFilter / kTest name
  ExprPtr a, b, c, d;         // operands: object/lhs/test, key/rhs/then, else/stop, step
  std::vector<ExprPtr> items; // kList, kTuple
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;  // kDict
  Arguments args;             // kCall, kFilter, kTest
  BinaryOp binary_op = BinaryOp::kAdd;
  std::vector<std::pair<CompareOp, ExprPtr>> comparisons;  // kCompare: a op0 x0 op1 x1 …
  bool negated = false;       // kTest: `is not`

  Expr(ExprType t, size_t off) : type(t), offset(off) {}
};

enum class StmtType {
  kText, kOutput, kIf, kFor, kSet, kSetBlock, kMacro, kCallBlock, kFilterBlock, kBreak, kContinue, kWith,
  kGeneration,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// `name` or `name.attr` (attribute assignment on a namespace).
struct AssignTarget {
  std::string name;
  std::string attr;
};

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct Stmt {
  StmtType type;
  size_t offset = 0;
  std::string text;                       // kText
  ExprPtr expr;                           // kOutput, kFor iterable, kSet value, kCallBlock call, kFilterBlock chain
  ExprPtr condition;                      // kFor `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: if / elif
  Body body;                              // kFor, kSetBlock, kMacro, kCallBlock, kFilterBlock, kWith, kGeneration
  Body else_body;                         // kIf, kFor
  std::vector<AssignTarget> targets;      // kFor, kSet, kSetBlock
  bool unpack = false;                    // kFor / kSet: targets form a tuple
  bool recursive = false;                 // kFor
  std::string name;                       // kMacro
  std::vector<MacroParam> params;         // kMacro, kCallBlock (caller's parameters)
  std::vector<std::pair<std::string, ExprPtr>> assignments;  // kWith

  Stmt(StmtType t, size_t off) : type(t), offset(off) {}
};

}  // namespace loom::jinja
