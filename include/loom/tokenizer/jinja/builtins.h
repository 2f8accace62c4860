// What templates can do to values: jinja2's filters and tests (the subset chat
// templates use, plus a margin), Python's operators, attribute/item lookup and
// the str/dict/list methods reachable from a template under Transformers'
// ImmutableSandboxedEnvironment (mutating methods are refused, as there).
// All of these throw RenderError; the renderer adds the line.
#pragma once

#include <string>

#include "loom/tokenizer/jinja/ast.h"
#include "loom/tokenizer/jinja/value.h"

namespace loom::jinja {

using FilterFn = Value (*)(const Value& input, CallArgs& args);
using TestFn = bool (*)(const Value& input, CallArgs& args);

// nullptr when jinja2 has no such filter/test (or loom does not implement it).
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);

// jinja2's environment.getattr / getitem: `obj.name` prefers Python attributes
// (methods) then items; `obj[key]` prefers items then attributes. Missing →
// Undefined carrying jinja2's message.
Value get_attribute(const Value& obj, const std::string& name);
// Only the Python method `name` of str/dict/list (bound), an Undefined carrying
// the sandbox's refusal for mutating ones, or a hint-less Undefined if none.
Value method_of(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for str and sequences (missing bounds are Undefined/None).
Value slice_value(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value call_value(const Value& callee, CallArgs& args);

Value binary_op(BinaryOp op, const Value& lhs, const Value& rhs);
Value negate(const Value& v);
bool compare(CompareOp op, const Value& lhs, const Value& rhs);
// Python `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Python `<` for sorting and min/max; strings, numbers and sequences.
bool less_than(const Value& a, const Value& b);

// The items a `for` loop visits: list/tuple items, dict keys, str characters;
// Undefined is empty.
List iterate(const Value& v);
// Python len().
int64_t length_of(const Value& v);

// Python printf-style formatting (`fmt % args`, the `format` filter).
std::string printf_format(const std::string& fmt, const List& args);

// The current local time formatted with C strftime (Transformers' strftime_now).
std::string strftime_local(const std::string& format, int64_t unix_seconds);

}  // namespace loom::jinja
