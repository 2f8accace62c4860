#include "loom/tokenizer/jinja/parser.h"

#include <set>

#include "loom/tokenizer/jinja/builtins.h"

namespace loom::jinja {

namespace {

struct SyntaxError {
  size_t offset;
  std::string message;
};

std::string describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData: return "template text";
    case TokenType::kVariableBegin: return "'{{'";
    case TokenType::kVariableEnd: return "'}}'";
    case TokenType::kBlockBegin: return "'{%'";
    case TokenType::kBlockEnd: return "'%}'";
    case TokenType::kName: return "'" + t.text + "'";
    case TokenType::kString: return "string literal";
    case TokenType::kInteger:
    case TokenType::kFloat: return "number " + t.text;
    case TokenType::kOperator: return "'" + t.text + "'";
    case TokenType::kEof: return "end of template";
  }
  return "token";
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  Body parse_template() {
    Body body = parse_until({});
    if (cur().type != TokenType::kEof) fail(cur().offset, "unexpected " + describe(cur()));
    return body;
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& message) const { throw SyntaxError{offset, message}; }

  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokenType::kName && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(cur().offset, std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect_name(const char* n) {
    if (!skip_name(n)) fail(cur().offset, std::string("expected '") + n + "', got " + describe(cur()));
  }
  std::string expect_identifier(const char* what) {
    if (cur().type != TokenType::kName) fail(cur().offset, std::string("expected ") + what + ", got " + describe(cur()));
    return next().text;
  }
  void expect_block_end(const char* tag) {
    if (cur().type != TokenType::kBlockEnd) {
      fail(cur().offset, std::string("expected '%}' to end the '") + tag + "' tag, got " + describe(cur()));
    }
    next();
  }

  // Parses statements until a block tag whose name is in `end_tags`; leaves the
  // stream on that tag's name. With no end tags, parses to end of template.
  Body parse_until(const std::set<std::string>& end_tags, size_t opened_at = 0, const char* opener = nullptr) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (!end_tags.empty()) {
          std::string expected;
          for (const auto& e : end_tags) expected += (expected.empty() ? "'" : " or '") + e + "'";
          fail(opened_at, std::string("unclosed '") + opener + "' block: reached the end of the template looking for " +
                              expected);
        }
        return body;
      }
      if (t.type == TokenType::kData) {
        auto s = std::make_unique<Stmt>(StmtType::kText, t.offset);
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TokenType::kVariableBegin) {
        next();
        auto s = std::make_unique<Stmt>(StmtType::kOutput, t.offset);
        s->expr = parse_tuple(true, {});
        if (cur().type != TokenType::kVariableEnd) fail(cur().offset, "expected '}}', got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        const Token& tag = peek();
        if (tag.type == TokenType::kName && end_tags.count(tag.text)) {
          next();  // now on the tag name
          return body;
        }
        next();
        if (StmtPtr s = parse_statement(t.offset)) body.push_back(std::move(s));
      } else {
        fail(t.offset, "unexpected " + describe(t));
      }
    }
  }

  // After parse_until returned on an end tag: consume `name %}`.
  void finish_tag(const char* name) {
    expect_name(name);
    expect_block_end(name);
  }

  StmtPtr parse_statement(size_t offset) {
    DepthGuard guard(*this);
    const Token& t = cur();
    if (t.type != TokenType::kName) fail(t.offset, "expected a tag name after '{%', got " + describe(t));
    const std::string tag = t.text;
    static const std::set<std::string> kUnsupported = {"extends", "include", "import", "from", "block", "autoescape",
                                                       "do", "trans", "pluralize", "debug"};
    if (kUnsupported.count(tag)) {
      fail(t.offset, "unsupported tag '" + tag + "': loom's Jinja subset has no template loading, blocks or the '" +
                         tag + "' extension");
    }
    next();
    if (tag == "if") return parse_if(offset);
    if (tag == "for") return parse_for(offset);
    if (tag == "set") return parse_set(offset);
    if (tag == "macro") return parse_macro(offset);
    if (tag == "call") return parse_call_block(offset);
    if (tag == "filter") return parse_filter_block(offset);
    if (tag == "with") return parse_with(offset);
    if (tag == "print") {
      auto s = std::make_unique<Stmt>(StmtType::kOutput, offset);
      s->expr = parse_tuple(true, {});
      expect_block_end("print");
      return s;
    }
    if (tag == "generation") {
      // Transformers' AssistantTracker tag: renders its body unchanged.
      expect_block_end("generation");
      auto s = std::make_unique<Stmt>(StmtType::kGeneration, offset);
      s->body = parse_until({"endgeneration"}, offset, "generation");
      finish_tag("endgeneration");
      return s;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(t.offset, "'" + tag + "' outside of a for loop");
      expect_block_end(tag.c_str());
      return std::make_unique<Stmt>(tag == "break" ? StmtType::kBreak : StmtType::kContinue, offset);
    }
    fail(t.offset, "unknown tag '" + tag + "'");
  }

  StmtPtr parse_if(size_t offset) {
    auto s = std::make_unique<Stmt>(StmtType::kIf, offset);
    ExprPtr cond = parse_tuple(false, {});
    expect_block_end("if");
    while (true) {
      Body body = parse_until({"elif", "else", "endif"}, offset, "if");
      s->branches.emplace_back(std::move(cond), std::move(body));
      const std::string which = next().text;
      if (which == "elif") {
        cond = parse_tuple(false, {});
        expect_block_end("elif");
        continue;
      }
      if (which == "else") {
        expect_block_end("else");
        s->else_body = parse_until({"endif"}, offset, "if");
        finish_tag("endif");
      } else {
        expect_block_end("endif");
      }
      return s;
    }
  }

  // Names, optionally a comma-separated tuple (optionally parenthesized).
  std::vector<AssignTarget> parse_name_targets(bool* unpack, bool allow_namespace) {
    std::vector<AssignTarget> targets;
    *unpack = false;
    if (allow_namespace && cur().type == TokenType::kName && peek().type == TokenType::kOperator &&
        peek().text == ".") {
      AssignTarget t;
      t.name = next().text;
      next();
      t.attr = expect_identifier("an attribute name");
      targets.push_back(std::move(t));
      return targets;
    }
    const bool paren = skip_op("(");
    while (true) {
      const Token& n = cur();
      if (n.type != TokenType::kName) fail(n.offset, "expected a variable name to assign to, got " + describe(n));
      if (n.text == "true" || n.text == "false" || n.text == "none" || n.text == "True" || n.text == "False" ||
          n.text == "None") {
        fail(n.offset, "cannot assign to '" + n.text + "'");
      }
      targets.push_back(AssignTarget{next().text, {}});
      if (!skip_op(",")) break;
      *unpack = true;
      if (paren && is_op(")")) break;
      if (!paren && (is_name("in") || is_op("="))) break;
    }
    if (paren) {
      expect_op(")");
      *unpack = *unpack || targets.size() > 1;
    }
    return targets;
  }

  StmtPtr parse_for(size_t offset) {
    auto s = std::make_unique<Stmt>(StmtType::kFor, offset);
    s->targets = parse_name_targets(&s->unpack, false);
    expect_name("in");
    s->expr = parse_tuple(false, {"recursive"});
    if (skip_name("if")) s->condition = parse_expression(true);
    if (is_name("recursive")) fail(cur().offset, "recursive for loops are not supported");
    expect_block_end("for");
    ++loop_depth_;
    s->body = parse_until({"else", "endfor"}, offset, "for");
    --loop_depth_;
    if (next().text == "else") {
      expect_block_end("else");
      s->else_body = parse_until({"endfor"}, offset, "for");
      finish_tag("endfor");
    } else {
      expect_block_end("endfor");
    }
    return s;
  }

  StmtPtr parse_set(size_t offset) {
    bool unpack = false;
    std::vector<AssignTarget> targets = parse_name_targets(&unpack, true);
    if (skip_op("=")) {
      auto s = std::make_unique<Stmt>(StmtType::kSet, offset);
      s->targets = std::move(targets);
      s->unpack = unpack;
      s->expr = parse_tuple(true, {});
      expect_block_end("set");
      return s;
    }
    if (unpack || targets.size() != 1) fail(cur().offset, "a block 'set' assigns to a single name");
    auto s = std::make_unique<Stmt>(StmtType::kSetBlock, offset);
    s->targets = std::move(targets);
    if (is_op("|")) s->expr = parse_filter_chain(nullptr, cur().offset);
    expect_block_end("set");
    s->body = parse_until({"endset"}, offset, "set");
    finish_tag("endset");
    return s;
  }

  void parse_signature(std::vector<MacroParam>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      MacroParam p;
      p.name = expect_identifier("a parameter name");
      if (skip_op("=")) {
        p.default_value = parse_expression(true);
      } else {
        for (const auto& q : params) {
          if (q.default_value) fail(cur().offset, "non-default parameter '" + p.name + "' follows default parameter");
        }
      }
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  StmtPtr parse_macro(size_t offset) {
    auto s = std::make_unique<Stmt>(StmtType::kMacro, offset);
    s->name = expect_identifier("a macro name");
    parse_signature(s->params);
    expect_block_end("macro");
    const int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_until({"endmacro"}, offset, "macro");
    loop_depth_ = saved;
    finish_tag("endmacro");
    return s;
  }

  StmtPtr parse_call_block(size_t offset) {
    auto s = std::make_unique<Stmt>(StmtType::kCallBlock, offset);
    if (is_op("(")) parse_signature(s->params);
    s->expr = parse_expression(true);
    if (s->expr->type != ExprType::kCall) fail(s->expr->offset, "expected a macro call after 'call'");
    expect_block_end("call");
    s->body = parse_until({"endcall"}, offset, "call");
    finish_tag("endcall");
    return s;
  }

  StmtPtr parse_filter_block(size_t offset) {
    auto s = std::make_unique<Stmt>(StmtType::kFilterBlock, offset);
    s->expr = parse_filter_chain(nullptr, cur().offset, /*leading_pipe=*/false);
    expect_block_end("filter");
    s->body = parse_until({"endfilter"}, offset, "filter");
    finish_tag("endfilter");
    return s;
  }

  StmtPtr parse_with(size_t offset) {
    auto s = std::make_unique<Stmt>(StmtType::kWith, offset);
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->assignments.empty()) expect_op(",");
      std::string name = expect_identifier("a variable name");
      expect_op("=");
      s->assignments.emplace_back(std::move(name), parse_expression(true));
    }
    expect_block_end("with");
    s->body = parse_until({"endwith"}, offset, "with");
    finish_tag("endwith");
    return s;
  }

  // ----- expressions -----

  bool is_tuple_end(const std::set<std::string>& extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof) return true;
    if (t.type == TokenType::kName && extra_end.count(t.text)) return true;
    return false;
  }

  ExprPtr parse_tuple(bool condexpr, const std::set<std::string>& extra_end, bool explicit_parens = false) {
    const size_t offset = cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end) || (explicit_parens && is_op(")"))) break;
      items.push_back(parse_expression(condexpr));
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parens) fail(cur().offset, "expected an expression, got " + describe(cur()));
    }
    auto e = std::make_unique<Expr>(ExprType::kTuple, offset);
    e->items = std::move(items);
    return e;
  }

  // Recursive descent: bound the nesting so hostile input cannot overflow the stack.
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.fail(p.cur().offset, "template nests too deeply (more than 128 levels)");
    }
    ~DepthGuard() { --p.depth_; }
  };
  static constexpr int kMaxDepth = 128;

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const size_t offset = next().offset;
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_expression(true);
      auto c = std::make_unique<Expr>(ExprType::kConditional, offset);
      c->a = std::move(test);
      c->b = std::move(expr);
      c->c = std::move(otherwise);
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const size_t offset = next().offset;
      auto e = std::make_unique<Expr>(ExprType::kOr, offset);
      e->a = std::move(left);
      e->b = parse_and();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const size_t offset = next().offset;
      auto e = std::make_unique<Expr>(ExprType::kAnd, offset);
      e->a = std::move(left);
      e->b = parse_not();
      left = std::move(e);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const size_t offset = next().offset;
      auto e = std::make_unique<Expr>(ExprType::kNot, offset);
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t offset = cur().offset;
    ExprPtr first = parse_math1();
    std::vector<std::pair<CompareOp, ExprPtr>> ops;
    while (true) {
      CompareOp op;
      if (skip_op("==")) op = CompareOp::kEq;
      else if (skip_op("!=")) op = CompareOp::kNe;
      else if (skip_op("<")) op = CompareOp::kLt;
      else if (skip_op("<=")) op = CompareOp::kLe;
      else if (skip_op(">")) op = CompareOp::kGt;
      else if (skip_op(">=")) op = CompareOp::kGe;
      else if (skip_name("in")) op = CompareOp::kIn;
      else if (is_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        next();
        next();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      ops.emplace_back(op, parse_math1());
    }
    if (ops.empty()) return first;
    auto e = std::make_unique<Expr>(ExprType::kCompare, offset);
    e->a = std::move(first);
    e->comparisons = std::move(ops);
    return e;
  }

  ExprPtr make_binary(BinaryOp op, ExprPtr lhs, ExprPtr rhs, size_t offset) {
    auto e = std::make_unique<Expr>(ExprType::kBinary, offset);
    e->binary_op = op;
    e->a = std::move(lhs);
    e->b = std::move(rhs);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      BinaryOp op = t.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = make_binary(op, std::move(left), parse_concat(), t.offset);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const size_t offset = next().offset;
      left = make_binary(BinaryOp::kConcat, std::move(left), parse_math2(), offset);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      BinaryOp op = t.text == "*" ? BinaryOp::kMul : t.text == "/" ? BinaryOp::kDiv
                  : t.text == "//" ? BinaryOp::kFloorDiv : BinaryOp::kMod;
      left = make_binary(op, std::move(left), parse_pow(), t.offset);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const size_t offset = next().offset;
      left = make_binary(BinaryOp::kPow, std::move(left), parse_unary(true), offset);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const size_t offset = cur().offset;
    ExprPtr node;
    if (skip_op("-")) {
      node = std::make_unique<Expr>(ExprType::kNeg, offset);
      node->a = parse_unary(false);
    } else if (skip_op("+")) {
      node = std::make_unique<Expr>(ExprType::kPos, offset);
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    const size_t offset = t.offset;
    switch (t.type) {
      case TokenType::kName: {
        next();
        auto e = std::make_unique<Expr>(ExprType::kConst, offset);
        if (t.text == "true" || t.text == "True") e->value = Value(true);
        else if (t.text == "false" || t.text == "False") e->value = Value(false);
        else if (t.text == "none" || t.text == "None") e->value = Value::none();
        else {
          e->type = ExprType::kName;
          e->name = t.text;
        }
        return e;
      }
      case TokenType::kString: {
        std::string s;
        while (cur().type == TokenType::kString) s += next().text;  // adjacent literals concatenate
        auto e = std::make_unique<Expr>(ExprType::kConst, offset);
        e->value = Value(std::move(s));
        return e;
      }
      case TokenType::kInteger: {
        next();
        auto e = std::make_unique<Expr>(ExprType::kConst, offset);
        e->value = Value(t.int_value);
        return e;
      }
      case TokenType::kFloat: {
        next();
        auto e = std::make_unique<Expr>(ExprType::kConst, offset);
        e->value = Value(t.float_value);
        return e;
      }
      case TokenType::kOperator:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, /*explicit_parens=*/true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    fail(offset, "unexpected " + describe(t) + " in an expression");
  }

  ExprPtr parse_list() {
    const size_t offset = next().offset;
    auto e = std::make_unique<Expr>(ExprType::kList, offset);
    while (!is_op("]")) {
      if (!e->items.empty()) expect_op(",");
      if (is_op("]")) break;
      e->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    const size_t offset = next().offset;
    auto e = std::make_unique<Expr>(ExprType::kDict, offset);
    while (!is_op("}")) {
      if (!e->pairs.empty()) expect_op(",");
      if (is_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      ExprPtr value = parse_expression(true);
      e->pairs.emplace_back(std::move(key), std::move(value));
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.text == ".") {
      const Token& attr = cur();
      if (attr.type == TokenType::kName) {
        next();
        auto e = std::make_unique<Expr>(ExprType::kGetAttr, attr.offset);
        e->a = std::move(node);
        e->name = attr.text;
        return e;
      }
      if (attr.type == TokenType::kInteger) {
        next();
        auto e = std::make_unique<Expr>(ExprType::kGetItem, attr.offset);
        e->a = std::move(node);
        e->b = std::make_unique<Expr>(ExprType::kConst, attr.offset);
        e->b->value = Value(attr.int_value);
        return e;
      }
      fail(attr.offset, "expected an attribute name after '.', got " + describe(attr));
    }
    // '[' subscript or slice
    const size_t offset = t.offset;
    ExprPtr parts[3];
    bool is_slice = false;
    int idx = 0;
    while (!is_op("]")) {
      if (is_op(":")) {
        next();
        is_slice = true;
        if (++idx > 2) fail(cur().offset, "too many ':' in a slice");
        continue;
      }
      if (parts[idx]) fail(cur().offset, "expected ']' or ':', got " + describe(cur()));
      if (!is_slice && idx == 0) {
        parts[0] = parse_tuple(true, {});
        if (!is_op(":") && !is_op("]")) fail(cur().offset, "expected ']', got " + describe(cur()));
      } else {
        parts[idx] = parse_expression(true);
      }
    }
    expect_op("]");
    if (!is_slice) {
      if (!parts[0]) fail(offset, "empty subscript '[]'");
      auto e = std::make_unique<Expr>(ExprType::kGetItem, offset);
      e->a = std::move(node);
      e->b = std::move(parts[0]);
      return e;
    }
    auto e = std::make_unique<Expr>(ExprType::kSlice, offset);
    e->a = std::move(node);
    e->b = std::move(parts[0]);
    e->c = std::move(parts[1]);
    e->d = std::move(parts[2]);
    return e;
  }

  void parse_call_args(Arguments& args) {
    expect_op("(");
    bool seen_keyword = false;
    while (!is_op(")")) {
      if (!args.positional.empty() || !args.keyword.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail(cur().offset, "*args / **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        std::string key = next().text;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
        seen_keyword = true;
      } else {
        if (seen_keyword) fail(cur().offset, "positional argument follows keyword argument");
        args.positional.push_back(parse_expression(true));
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = std::make_unique<Expr>(ExprType::kCall, cur().offset);
    e->a = std::move(node);
    parse_call_args(e->args);
    return e;
  }

  // `| name(args) | name …` applied to `node` (null for filter blocks / set blocks).
  ExprPtr parse_filter_chain(ExprPtr node, size_t offset, bool leading_pipe = true) {
    bool first = true;
    while ((first && !leading_pipe) || is_op("|")) {
      if (!(first && !leading_pipe)) next();
      first = false;
      const Token& name_tok = cur();
      std::string name = expect_identifier("a filter name");
      while (is_op(".")) {
        next();
        name += '.';
        name += expect_identifier("a filter name");
      }
      if (!find_filter(name)) fail(name_tok.offset, "unknown filter '" + name + "'");
      auto e = std::make_unique<Expr>(ExprType::kFilter, name_tok.offset);
      e->a = std::move(node);
      e->name = std::move(name);
      if (is_op("(")) parse_call_args(e->args);
      node = std::move(e);
    }
    (void)offset;
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node), cur().offset);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    next();  // 'is'
    const bool negated = skip_name("not");
    const Token& name_tok = cur();
    std::string name = expect_identifier("a test name");
    while (is_op(".")) {
      next();
      name += '.';
      name += expect_identifier("a test name");
    }
    if (!find_test(name)) fail(name_tok.offset, "unknown test '" + name + "'");
    auto e = std::make_unique<Expr>(ExprType::kTest, name_tok.offset);
    e->a = std::move(node);
    e->name = std::move(name);
    e->negated = negated;
    if (is_op("(")) {
      parse_call_args(e->args);
    } else {
      const Token& t = cur();
      const bool starts_arg =
          t.type == TokenType::kString || t.type == TokenType::kInteger || t.type == TokenType::kFloat ||
          (t.type == TokenType::kOperator && (t.text == "[" || t.text == "{")) ||
          (t.type == TokenType::kName && t.text != "else" && t.text != "or" && t.text != "and" && t.text != "if" &&
           t.text != "is" && t.text != "in" && t.text != "not" && t.text != "recursive");
      if (starts_arg) {
        if (t.type == TokenType::kName && t.text == "is") fail(t.offset, "you cannot chain multiple tests with 'is'");
        e->args.positional.push_back(parse_postfix(parse_primary()));
      }
    }
    return e;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Body> parse(const std::vector<Token>& tokens, const SourceMap& source_map) {
  try {
    return Parser(tokens).parse_template();
  } catch (const SyntaxError& e) {
    return parse_error("template syntax error at " + source_map.describe(e.offset) + ": " + e.message);
  }
}

}  // namespace loom::jinja
