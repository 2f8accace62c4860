#include "loom/tokenizer/jinja/template.h"

#include <unordered_map>

#include "loom/tokenizer/jinja/ast.h"
#include "loom/tokenizer/jinja/builtins.h"
#include "loom/tokenizer/jinja/lexer.h"
#include "loom/tokenizer/jinja/parser.h"

namespace loom::jinja {

struct Template::Impl {
  std::string source;  // normalized
  SourceMap source_map;
  Body body;

  Impl(std::string s, Body b) : source(std::move(s)), source_map(source), body(std::move(b)) {}
};

Result<Template> Template::parse(const std::string& source, TemplateOptions options) {
  std::string normalized = normalize_template_source(source, options.keep_trailing_newline);
  LexerOptions lex;
  lex.trim_blocks = options.trim_blocks;
  lex.lstrip_blocks = options.lstrip_blocks;
  lex.keep_trailing_newline = options.keep_trailing_newline;
  LOOM_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(normalized, lex));
  SourceMap map(normalized);
  LOOM_ASSIGN_OR_RETURN(Body body, jinja::parse(tokens, map));
  return Template(std::make_shared<const Impl>(std::move(normalized), std::move(body)));
}

namespace {

// Variables visible at one nesting level; loops, macros and `with` open a new
// one whose parent is the enclosing level (jinja2's scoping: `set` inside a loop
// body does not leak out, `set` inside `if` does).
struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

// Does `name` appear as a variable anywhere under these statements? (jinja2
// gives a macro `varargs`/`kwargs`/`caller` only when its body mentions them.)
bool expr_mentions(const Expr* e, const std::string& name);
bool body_mentions(const Body& body, const std::string& name);

bool args_mention(const Arguments& args, const std::string& name) {
  for (const auto& a : args.positional) {
    if (expr_mentions(a.get(), name)) return true;
  }
  for (const auto& kv : args.keyword) {
    if (expr_mentions(kv.second.get(), name)) return true;
  }
  return false;
}

bool expr_mentions(const Expr* e, const std::string& name) {
  if (!e) return false;
  if (e->type == ExprType::kName && e->name == name) return true;
  if (expr_mentions(e->a.get(), name) || expr_mentions(e->b.get(), name) || expr_mentions(e->c.get(), name) ||
      expr_mentions(e->d.get(), name)) {
    return true;
  }
  for (const auto& i : e->items) {
    if (expr_mentions(i.get(), name)) return true;
  }
  for (const auto& p : e->pairs) {
    if (expr_mentions(p.first.get(), name) || expr_mentions(p.second.get(), name)) return true;
  }
  for (const auto& c : e->comparisons) {
    if (expr_mentions(c.second.get(), name)) return true;
  }
  return args_mention(e->args, name);
}

bool body_mentions(const Body& body, const std::string& name) {
  for (const auto& s : body) {
    if (expr_mentions(s->expr.get(), name) || expr_mentions(s->condition.get(), name)) return true;
    for (const auto& br : s->branches) {
      if (expr_mentions(br.first.get(), name) || body_mentions(br.second, name)) return true;
    }
    if (body_mentions(s->body, name) || body_mentions(s->else_body, name)) return true;
    for (const auto& p : s->params) {
      if (expr_mentions(p.default_value.get(), name)) return true;
    }
    for (const auto& a : s->assignments) {
      if (expr_mentions(a.second.get(), name)) return true;
    }
  }
  return false;
}

constexpr int kMaxCallDepth = 200;

class Renderer {
 public:
  explicit Renderer(const Template::Impl& impl) : impl_(impl) {}

  std::string render(const Value& context) {
    auto globals = std::make_shared<Scope>(nullptr);
    install_globals(*globals);
    auto root = std::make_shared<Scope>(globals);
    if (context.is_dict()) {
      for (const auto& [k, v] : context.as_dict().entries) {
        if (!k.is_string()) throw RenderError("context keys must be strings, got " + k.type_name());
        root->vars[k.as_string()] = v;
      }
    } else if (!context.is_undefined() && !context.is_none()) {
      throw RenderError("the render context must be a dict of variables, got " + context.type_name());
    }
    std::string out;
    exec_body(impl_.body, root, out);
    return out;
  }

  size_t error_offset() const { return offset_; }

 private:
  void install_globals(Scope& g) {
    g.vars["range"] = Value::function("range", [](CallArgs& a) {
      a.check("range", 3, {});
      if (a.positional.empty()) throw RenderError("range expected at least 1 argument, got 0");
      for (const auto& v : a.positional) {
        if (!v.is_int() && !v.is_bool()) throw RenderError("'" + v.type_name() + "' object cannot be interpreted as an integer");
      }
      int64_t start = 0, stop, step = 1;
      if (a.positional.size() == 1) {
        stop = a.positional[0].as_int();
      } else {
        start = a.positional[0].as_int();
        stop = a.positional[1].as_int();
        if (a.positional.size() == 3) step = a.positional[2].as_int();
      }
      if (step == 0) throw RenderError("range() arg 3 must not be zero");
      List out;
      const int64_t count = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                                     : (start > stop ? (start - stop - step - 1) / -step : 0);
      // The sandbox caps range() at MAX_RANGE = 100000 items.
      if (count > 100000) throw RenderError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      for (int64_t i = 0, v = start; i < count; ++i, v += step) out.emplace_back(v);
      return Value(std::move(out));
    });
    g.vars["dict"] = Value::function("dict", [](CallArgs& a) {
      auto d = std::make_shared<Dict>();
      if (a.positional.size() > 1) throw RenderError("dict expected at most 1 argument");
      if (!a.positional.empty()) {
        const Value& src = a.positional[0];
        if (src.is_dict()) {
          for (const auto& e : src.as_dict().entries) d->set(e.first, e.second);
        } else {
          for (const Value& pair : iterate(src)) {
            const List& kv = pair.as_list();
            if (!pair.is_list() || kv.size() != 2) throw RenderError("dictionary update sequence element has wrong length");
            d->set(kv[0], kv[1]);
          }
        }
      }
      for (auto& [k, v] : a.keyword) d->set(Value(k), v);
      return Value(std::move(d));
    });
    g.vars["namespace"] = Value::function("namespace", [](CallArgs& a) {
      Value ns = Value::make_namespace();
      Dict& d = ns.as_dict();
      if (a.positional.size() > 1) throw RenderError("namespace() takes at most 1 positional argument");
      if (!a.positional.empty()) {
        if (!a.positional[0].is_dict()) throw RenderError("namespace() positional argument must be a dict");
        for (const auto& e : a.positional[0].as_dict().entries) d.set(e.first, e.second);
      }
      for (auto& [k, v] : a.keyword) d.set(Value(k), v);
      return ns;
    });
    g.vars["cycler"] = Value::function("cycler", [](CallArgs& a) {
      auto items = std::make_shared<List>(a.positional);
      if (items->empty()) throw RenderError("cycler needs at least one item");
      auto pos = std::make_shared<size_t>(0);
      auto obj = std::make_shared<Dict>();
      obj->set(Value("next"), Value::function("next", [items, pos](CallArgs&) {
                 Value v = (*items)[*pos];
                 *pos = (*pos + 1) % items->size();
                 return v;
               }));
      obj->set(Value("reset"), Value::function("reset", [pos](CallArgs&) {
                 *pos = 0;
                 return Value::none();
               }));
      obj->set(Value("current"), Value::function("current", [items, pos](CallArgs&) { return (*items)[*pos]; }));
      return Value(std::move(obj));
    });
    g.vars["joiner"] = Value::function("joiner", [](CallArgs& a) {
      const std::string sep = a.get(0, "sep", Value(", ")).to_str();
      auto used = std::make_shared<bool>(false);
      return Value::function("joiner", [sep, used](CallArgs&) {
        if (!*used) {
          *used = true;
          return Value("");
        }
        return Value(sep);
      });
    });
  }

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& s : body) {
      Flow f = exec(*s, scope, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
    offset_ = s.offset;
    switch (s.type) {
      case StmtType::kText:
        out += s.text;
        return Flow::kNormal;
      case StmtType::kOutput:
        out += eval(*s.expr, scope).to_str();
        return Flow::kNormal;
      case StmtType::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (eval(*cond, scope).truthy()) return exec_body(body, scope, out);
        }
        return exec_body(s.else_body, scope, out);
      case StmtType::kFor:
        return exec_for(s, scope, out);
      case StmtType::kSet: {
        Value v = eval(*s.expr, scope);
        offset_ = s.offset;
        assign(s, std::move(v), scope);
        return Flow::kNormal;
      }
      case StmtType::kSetBlock: {
        std::string captured;
        exec_body(s.body, scope, captured);
        Value v(std::move(captured));
        if (s.expr) v = apply_filters(*s.expr, std::move(v), scope);
        scope->vars[s.targets[0].name] = std::move(v);
        return Flow::kNormal;
      }
      case StmtType::kMacro:
        scope->vars[s.name] = make_macro(s, scope, nullptr);
        return Flow::kNormal;
      case StmtType::kCallBlock: {
        // caller() renders the block body with the parameters of `{% call(...) %}`.
        Value caller = make_macro(s, scope, "caller");
        const Expr& call = *s.expr;
        Value callee = eval(*call.a, scope);
        CallArgs args = eval_args(call.args, scope);
        args.keyword.emplace_back("caller", std::move(caller));
        offset_ = call.offset;
        out += call_value(callee, args).to_str();
        return Flow::kNormal;
      }
      case StmtType::kFilterBlock: {
        std::string captured;
        exec_body(s.body, scope, captured);
        out += apply_filters(*s.expr, Value(std::move(captured)), scope).to_str();
        return Flow::kNormal;
      }
      case StmtType::kWith: {
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [name, e] : s.assignments) inner->vars[name] = eval(*e, scope);
        return exec_body(s.body, inner, out);
      }
      case StmtType::kGeneration:
        return exec_body(s.body, scope, out);
      case StmtType::kBreak:
        return Flow::kBreak;
      case StmtType::kContinue:
        return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void bind_targets(const Stmt& s, const Value& v, Scope& scope) {
    if (!s.unpack) {
      scope.vars[s.targets[0].name] = v;
      return;
    }
    List items;
    if (v.is_list()) {
      items = v.as_list();
    } else if (v.is_string() || v.is_dict()) {
      items = iterate(v);
    } else {
      v.require_defined();
      throw RenderError("cannot unpack non-iterable " + v.type_name() + " object");
    }
    if (items.size() < s.targets.size()) {
      throw RenderError("not enough values to unpack (expected " + std::to_string(s.targets.size()) + ", got " +
                        std::to_string(items.size()) + ")");
    }
    if (items.size() > s.targets.size()) {
      throw RenderError("too many values to unpack (expected " + std::to_string(s.targets.size()) + ")");
    }
    for (size_t i = 0; i < items.size(); ++i) scope.vars[s.targets[i].name] = items[i];
  }

  void assign(const Stmt& s, Value v, const ScopePtr& scope) {
    const AssignTarget& t = s.targets[0];
    if (!t.attr.empty()) {
      const Value* ns = scope->lookup(t.name);
      if (!ns) throw RenderError("'" + t.name + "' is undefined");
      if (!ns->is_namespace()) throw RenderError("cannot assign attribute on non-namespace object");
      ns->as_dict().set(Value(t.attr), std::move(v));
      return;
    }
    bind_targets(s, v, *scope);
  }

  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out) {
    Value iterable = eval(*s.expr, scope);
    offset_ = s.expr->offset;
    if (iterable.is_none() || iterable.is_number() || iterable.is_callable()) {
      throw RenderError("'" + iterable.type_name() + "' object is not iterable");
    }
    List items = iterate(iterable);
    if (s.condition) {
      List kept;
      for (const Value& item : items) {
        auto probe = std::make_shared<Scope>(scope);
        bind_targets(s, item, *probe);
        if (eval(*s.condition, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(s.else_body, scope, out);
    const int64_t n = static_cast<int64_t>(items.size());
    // The loop object's keys, shared by every iteration (Values are immutable).
    static const Value kIndex("index"), kIndex0("index0"), kRevindex("revindex"), kRevindex0("revindex0"),
        kFirst("first"), kLast("last"), kLength("length"), kDepth("depth"), kDepth0("depth0"), kPrev("previtem"),
        kNext("nextitem"), kCycle("cycle"), kChanged("changed");
    auto changed_last = std::make_shared<std::pair<bool, Value>>(false, Value());
    for (int64_t i = 0; i < n; ++i) {
      auto iter_scope = std::make_shared<Scope>(scope);
      bind_targets(s, items[static_cast<size_t>(i)], *iter_scope);
      auto loop = std::make_shared<Dict>();
      loop->entries.reserve(14);
      loop->entries.emplace_back(kIndex, Value(i + 1));
      loop->entries.emplace_back(kIndex0, Value(i));
      loop->entries.emplace_back(kRevindex, Value(n - i));
      loop->entries.emplace_back(kRevindex0, Value(n - i - 1));
      loop->entries.emplace_back(kFirst, Value(i == 0));
      loop->entries.emplace_back(kLast, Value(i == n - 1));
      loop->entries.emplace_back(kLength, Value(n));
      loop->entries.emplace_back(kDepth, Value(1));
      loop->entries.emplace_back(kDepth0, Value(0));
      loop->entries.emplace_back(kPrev, i > 0 ? items[static_cast<size_t>(i - 1)]
                                                          : Value::undefined("there is no previous item"));
      loop->entries.emplace_back(kNext, i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                                              : Value::undefined("there is no next item"));
      loop->entries.emplace_back(kCycle, Value::function("cycle", [i](CallArgs& a) {
                                   if (a.positional.empty()) throw RenderError("no items for cycling given");
                                   return a.positional[static_cast<size_t>(i) % a.positional.size()];
                                 }));
      loop->entries.emplace_back(kChanged, Value::function("changed", [changed_last](CallArgs& a) {
                                   Value v = Value::tuple(a.positional);
                                   if (changed_last->first && changed_last->second.equals(v)) return Value(false);
                                   changed_last->first = true;
                                   changed_last->second = std::move(v);
                                   return Value(true);
                                 }));
      iter_scope->vars["loop"] = Value(std::move(loop));
      Flow f = exec_body(s.body, iter_scope, out);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // A macro (or the caller of a call block) as a callable value. It renders its
  // body in a fresh scope below the one it was defined in.
  Value make_macro(const Stmt& s, const ScopePtr& defining_scope, const char* name_override) {
    const std::string name = name_override ? name_override : s.name;
    const bool uses_varargs = body_mentions(s.body, "varargs");
    const bool uses_kwargs = body_mentions(s.body, "kwargs");
    const Stmt* stmt = &s;
    Renderer* self = this;
    // Weak: the defining scope holds this macro, a strong reference would leak the cycle.
    std::weak_ptr<Scope> weak_scope = defining_scope;
    return Value::function(name, [self, stmt, weak_scope, name, uses_varargs, uses_kwargs](CallArgs& a) {
      ScopePtr defining = weak_scope.lock();
      if (!defining) throw RenderError("macro '" + name + "' called after the scope it was defined in ended");
      if (self->depth_ >= kMaxCallDepth) throw RenderError("maximum macro recursion depth exceeded");
      struct DepthGuard {
        int& d;
        explicit DepthGuard(int& x) : d(x) { ++d; }
        ~DepthGuard() { --d; }
      } guard(self->depth_);
      auto scope = std::make_shared<Scope>(defining);
      const auto& params = stmt->params;
      List varargs;
      for (size_t i = 0; i < a.positional.size(); ++i) {
        if (i < params.size()) {
          scope->vars[params[i].name] = a.positional[i];
        } else if (uses_varargs) {
          varargs.push_back(a.positional[i]);
        } else {
          throw RenderError("macro '" + name + "' takes not more than " + std::to_string(params.size()) +
                            " argument(s)");
        }
      }
      auto kwargs = std::make_shared<Dict>();
      for (auto& [k, v] : a.keyword) {
        bool is_param = false;
        for (size_t i = 0; i < params.size(); ++i) {
          if (params[i].name == k) {
            if (i < a.positional.size()) throw RenderError("macro '" + name + "' got multiple values for argument '" + k + "'");
            scope->vars[k] = v;
            is_param = true;
          }
        }
        if (is_param) continue;
        if (k == "caller") {
          scope->vars["caller"] = v;
        } else if (uses_kwargs) {
          kwargs->set(Value(k), v);
        } else {
          throw RenderError("macro '" + name + "' takes no keyword argument '" + k + "'");
        }
      }
      for (const auto& p : params) {
        if (scope->vars.count(p.name)) continue;
        if (p.default_value) {
          scope->vars[p.name] = self->eval(*p.default_value, scope);
        } else {
          scope->vars[p.name] = Value::undefined("parameter '" + p.name + "' was not provided");
        }
      }
      scope->vars["varargs"] = Value::tuple(std::move(varargs));
      scope->vars["kwargs"] = Value(std::move(kwargs));
      std::string captured;
      const size_t saved = self->offset_;
      self->exec_body(stmt->body, scope, captured);
      self->offset_ = saved;
      return Value(std::move(captured));
    });
  }

  CallArgs eval_args(const Arguments& args, const ScopePtr& scope) {
    CallArgs out;
    out.positional.reserve(args.positional.size());
    for (const auto& e : args.positional) out.positional.push_back(eval(*e, scope));
    for (const auto& [k, e] : args.keyword) out.keyword.emplace_back(k, eval(*e, scope));
    return out;
  }

  // Applies a chain of Filter nodes whose innermost operand is null to `input`.
  Value apply_filters(const Expr& chain, Value input, const ScopePtr& scope) {
    if (chain.a) input = apply_filters(*chain.a, std::move(input), scope);
    CallArgs args = eval_args(chain.args, scope);
    offset_ = chain.offset;
    return find_filter(chain.name)(input, args);
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    offset_ = e.offset;
    switch (e.type) {
      case ExprType::kConst:
        return e.value;
      case ExprType::kName: {
        if (const Value* v = scope->lookup(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case ExprType::kList:
      case ExprType::kTuple: {
        List items;
        items.reserve(e.items.size());
        for (const auto& i : e.items) items.push_back(eval(*i, scope));
        return Value(std::move(items), e.type == ExprType::kTuple ? ListFlavor::kTuple : ListFlavor::kList);
      }
      case ExprType::kDict: {
        auto d = std::make_shared<Dict>();
        for (const auto& [k, v] : e.pairs) {
          Value key = eval(*k, scope);
          if (key.is_list() && key.flavor() != ListFlavor::kTuple) throw RenderError("unhashable type: 'list'");
          if (key.is_dict()) throw RenderError("unhashable type: 'dict'");
          d->set(key, eval(*v, scope));
        }
        return Value(std::move(d));
      }
      case ExprType::kGetAttr: {
        Value obj = eval(*e.a, scope);
        offset_ = e.offset;
        return get_attribute(obj, e.name);
      }
      case ExprType::kGetItem: {
        Value obj = eval(*e.a, scope);
        Value key = eval(*e.b, scope);
        offset_ = e.offset;
        return get_item(obj, key);
      }
      case ExprType::kSlice: {
        Value obj = eval(*e.a, scope);
        Value start = e.b ? eval(*e.b, scope) : Value::none();
        Value stop = e.c ? eval(*e.c, scope) : Value::none();
        Value step = e.d ? eval(*e.d, scope) : Value::none();
        offset_ = e.offset;
        return slice_value(obj, start, stop, step);
      }
      case ExprType::kCall: {
        Value callee = eval(*e.a, scope);
        CallArgs args = eval_args(e.args, scope);
        offset_ = e.offset;
        return call_value(callee, args);
      }
      case ExprType::kFilter: {
        Value input = e.a ? eval(*e.a, scope) : Value();
        CallArgs args = eval_args(e.args, scope);
        offset_ = e.offset;
        return find_filter(e.name)(input, args);
      }
      case ExprType::kTest: {
        Value input = eval(*e.a, scope);
        CallArgs args = eval_args(e.args, scope);
        offset_ = e.offset;
        const bool r = find_test(e.name)(input, args);
        return Value(e.negated ? !r : r);
      }
      case ExprType::kNot:
        return Value(!eval(*e.a, scope).truthy());
      case ExprType::kNeg: {
        Value v = eval(*e.a, scope);
        offset_ = e.offset;
        return negate(v);
      }
      case ExprType::kPos: {
        Value v = eval(*e.a, scope);
        offset_ = e.offset;
        if (!v.is_number()) {
          v.require_defined();
          throw RenderError("bad operand type for unary +: '" + v.type_name() + "'");
        }
        return v.is_bool() ? Value(v.as_int()) : v;
      }
      case ExprType::kBinary: {
        Value lhs = eval(*e.a, scope);
        Value rhs = eval(*e.b, scope);
        offset_ = e.offset;
        return binary_op(e.binary_op, lhs, rhs);
      }
      case ExprType::kAnd: {
        Value lhs = eval(*e.a, scope);
        if (!lhs.truthy()) return lhs;
        return eval(*e.b, scope);
      }
      case ExprType::kOr: {
        Value lhs = eval(*e.a, scope);
        if (lhs.truthy()) return lhs;
        return eval(*e.b, scope);
      }
      case ExprType::kCompare: {
        Value lhs = eval(*e.a, scope);
        for (const auto& [op, rhs_expr] : e.comparisons) {
          Value rhs = eval(*rhs_expr, scope);
          offset_ = rhs_expr->offset;
          if (!compare(op, lhs, rhs)) return Value(false);
          lhs = std::move(rhs);
        }
        return Value(true);
      }
      case ExprType::kConditional: {
        if (eval(*e.a, scope).truthy()) return eval(*e.b, scope);
        if (e.c) return eval(*e.c, scope);
        return Value::undefined("the inline if-expression on " + impl_.source_map.describe(e.offset) +
                                " evaluated to false and no else section was defined.");
      }
    }
    return Value();
  }

  const Template::Impl& impl_;
  size_t offset_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<std::string> Template::render(const Value& context) const {
  Renderer r(*impl_);
  try {
    return r.render(context);
  } catch (const TemplateException& e) {
    return invalid_argument("template raised an error at " + impl_->source_map.describe(r.error_offset()) + ": " +
                            e.what());
  } catch (const RenderError& e) {
    return invalid_argument("template render error at " + impl_->source_map.describe(r.error_offset()) + ": " +
                            e.what());
  } catch (const std::bad_alloc&) {
    return resource_exhausted("template render ran out of memory at " + impl_->source_map.describe(r.error_offset()));
  } catch (const std::exception& e) {
    return internal_error("template render failed at " + impl_->source_map.describe(r.error_offset()) + ": " +
                          e.what());
  }
}

}  // namespace loom::jinja
