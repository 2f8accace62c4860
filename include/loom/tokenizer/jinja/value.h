// The values a Jinja template computes with, modelled on the Python objects
// jinja2 sees when Transformers renders a chat template: None, bool, int, float,
// str, list/tuple, insertion-ordered dict, namespace and callables, plus
// jinja2's Undefined (prints as "", is falsy, raises when you look inside it).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::jinja {

class Value;
class Dict;
struct CallArgs;

using List = std::vector<Value>;
using Function = std::function<Value(CallArgs& args)>;

enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

// What Python type a sequence stands for; it only changes how str() prints it.
enum class ListFlavor : uint8_t { kList, kTuple, kDictItems, kDictKeys, kDictValues };

// Raised while rendering; Template::render turns it into a Status with the line.
class RenderError : public std::runtime_error {
 public:
  explicit RenderError(const std::string& message) : std::runtime_error(message) {}
};

// The template called raise_exception(msg): the message is the template's own.
class TemplateException : public RenderError {
 public:
  explicit TemplateException(const std::string& message) : RenderError(message) {}
};

class Value {
 public:
  Value() = default;  // undefined
  Value(bool b) : kind_(Kind::kBool), b_(b) {}                 // NOLINT
  Value(int v) : kind_(Kind::kInt), i_(v) {}                   // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}               // NOLINT
  Value(double v) : kind_(Kind::kFloat), f_(v) {}              // NOLINT
  Value(std::string s);                                        // NOLINT
  Value(const char* s) : Value(std::string(s)) {}              // NOLINT
  Value(List items, ListFlavor flavor = ListFlavor::kList);    // NOLINT
  Value(std::shared_ptr<Dict> dict);                           // NOLINT

  // Undefined with the message jinja2 would raise when it is used ("'x' is undefined").
  static Value undefined(std::string hint = {});
  static Value none();
  static Value tuple(List items) { return Value(std::move(items), ListFlavor::kTuple); }
  static Value function(std::string name, Function fn);
  static Value empty_dict();
  // A jinja2 namespace(): a dict whose attributes templates may assign.
  static Value make_namespace();
  // Throws RenderError for JSON nested deeper than 256 levels.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_namespace() const;

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  // int, bool or float as a double.
  double as_double() const;
  const std::string& as_string() const;
  const List& as_list() const;
  ListFlavor flavor() const { return flavor_; }
  Dict& as_dict() const;
  const Function& as_function() const;
  const std::string& callable_name() const;
  const std::string& undefined_hint() const;

  // Python truthiness (Undefined is falsy).
  bool truthy() const;
  // Python str(): what {{ value }} prints (Undefined prints "").
  std::string to_str() const;
  // Python repr(), used for values inside containers.
  std::string repr() const;
  // "str", "int", "list", "dict", … as Python names them in errors.
  std::string type_name() const;
  // Python ==: 1 == 1.0 == True, containers compare element-wise.
  bool equals(const Value& other) const;
  // Python json.dumps(value, ensure_ascii, indent, separators, sort_keys); throws
  // RenderError for values JSON cannot hold (Undefined, functions).
  std::string to_json(int indent = -1, bool ensure_ascii = false, bool sort_keys = false,
                      const std::string* item_separator = nullptr,
                      const std::string* key_separator = nullptr) const;

  // Throws RenderError with jinja2's message if this is Undefined.
  void require_defined() const;

 private:
  Kind kind_ = Kind::kUndefined;
  ListFlavor flavor_ = ListFlavor::kList;
  union {
    bool b_;
    int64_t i_ = 0;
    double f_;
  };
  // string / undefined hint, List, Dict or Callable, by kind_.
  std::shared_ptr<void> ptr_;
};

// Insertion-ordered like a Python dict; small (chat messages, tool schemas), so
// lookups scan.
class Dict {
 public:
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  size_t size() const { return entries.size(); }
};

struct CallArgs {
  List positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Python-style binding: positional slot i or keyword `name`, else `fallback`.
  // Throws if the argument was given both ways.
  Value get(size_t index, const std::string& name, Value fallback = Value()) const;
  bool has(size_t index, const std::string& name) const;
  // Rejects arguments beyond `max_positional` and keywords outside `allowed`.
  void check(const std::string& callee, size_t max_positional,
             std::initializer_list<const char*> allowed) const;
};

struct Callable {
  std::string name;
  Function fn;
};

// Python float repr: shortest round-trip digits, "1.0", "1e-05", "1e+16", "inf", "nan".
std::string format_python_float(double v);
// Python repr() of a str: quotes chosen like Python, non-printables escaped.
std::string python_string_repr(const std::string& s);

}  // namespace loom::jinja
