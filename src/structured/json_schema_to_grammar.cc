#include "loom/structured/json_schema_to_grammar.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "loom/structured/compile_budget.h"
#include "loom/structured/regex_to_grammar.h"
#include "structured/integer_range.h"
#include "structured/number_range.h"

namespace loom::structured {
namespace {

// ordered_json: properties are generated in the schema's own order.
using json = nlohmann::ordered_json;

// Whitespace where JSON allows it: none or one space, so a model cannot pad forever.
constexpr const char* kPrimitives = R"(ws ::= " "?
json-char ::= [^"\\\x00-\x1F\x7F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4})
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ("0" | [1-9] [0-9]{0,15})
json-number ::= json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?
json-bool ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-bool | json-null
json-member ::= json-string ws ":" ws json-value
json-object ::= "{" ws (json-member (ws "," ws json-member)*)? ws "}"
json-array ::= "[" ws (json-value (ws "," ws json-value)*)? ws "]"
json-date ::= [0-9]{4} "-" ("0" [1-9] | "1" [0-2]) "-" ("0" [1-9] | "1" [0-9] | "2" [0-8])
json-time ::= ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])
json-uuid ::= [0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}
)";

const std::set<std::string> kAnnotations = {"title",     "description", "default",  "examples", "$schema",
                                            "$id",       "$comment",    "readOnly", "writeOnly", "deprecated",
                                            "$defs",     "definitions", "contentMediaType", "contentEncoding"};

class SchemaConverter {
 public:
  SchemaConverter(const json& root, bool strict) : root_(root), strict_(strict) {}

  Result<std::string> convert() {
    LOOM_ASSIGN_OR_RETURN(std::string expr, visit(root_, "root", "#"));
    std::string out = "root ::= " + expr + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out + kPrimitives;
  }

 private:
  Status refuse(const std::string& path, const std::string& keyword, const std::string& why = "") {
    return unsupported("JSON Schema at " + path + ": keyword '" + keyword + "' " +
                       (why.empty() ? "is not supported" : why) +
                       (strict_ ? " (with strict false, unsupported keywords are ignored)" : ""));
  }
  Status bad(const std::string& path, const std::string& what) {
    return invalid_argument("JSON Schema at " + path + ": " + what);
  }

  std::string new_rule(const std::string& hint, const std::string& body) {
    std::string base;
    for (char c : hint) base += (std::isalnum(static_cast<unsigned char>(c)) ? c : '-');
    std::string name = "s-" + base;
    // The next suffix per base: probing 2, 3, … from the start each time made an
    // object of n optional properties (n "-first"/"-rest" rules) quadratic (20k: minutes).
    for (int& i = next_suffix_.try_emplace(base, 2).first->second; rules_.count(name); ++i) name = "s-" + base + "-" + std::to_string(i);
    rules_[name] = body;
    return name;
  }

  Result<std::string> visit(const json& s, const std::string& hint, const std::string& path) {
    // Subschemas nest by recursion: refuse what would overflow the stack.
    if (depth_ >= 100) return bad(path, "schemas nest deeper than 100");
    LOOM_RETURN_IF_ERROR(check_compile_budget());
    ++depth_;
    auto r = visit_nested(s, hint, path);
    --depth_;
    return r;
  }

  Result<std::string> visit_nested(const json& s, const std::string& hint, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return std::string("json-value");
      return bad(path, "schema 'false' matches nothing");
    }
    if (!s.is_object()) return bad(path, "a schema must be an object or a boolean");
    static const std::set<std::string> known = {
        "type",      "properties", "required", "additionalProperties", "enum",      "const",
        "items",     "prefixItems", "minItems", "maxItems",            "anyOf",     "oneOf",
        "allOf",     "$ref",       "format",   "minLength",            "maxLength", "pattern",
        "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum"};
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (known.count(it.key()) || kAnnotations.count(it.key())) continue;
      if (strict_) return refuse(path, it.key());
    }
    if (s.contains("$ref")) return visit_ref(s, path);
    if (s.contains("const")) return gbnf_literal(s["const"].dump());
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) return bad(path + "/enum", "expected a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < e.size(); ++i) out += (i ? " | " : "") + gbnf_literal(e[i].dump());
      return out + ")";
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const json& alts = s[key];
      if (!alts.is_array() || alts.empty()) return bad(path + "/" + key, "expected a non-empty array");
      std::string out = "(";
      for (size_t i = 0; i < alts.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(std::string a, visit(merged_with_siblings(alts[i], s, key), hint + "-" + std::to_string(i),
                                                   path + "/" + key + "/" + std::to_string(i)));
        out += (i ? " | " : "") + a;
      }
      return out + ")";
    }
    if (s.contains("allOf")) {
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        if (strict_) return refuse(path, "allOf", "is supported with one schema only");
      } else {
        return visit(merged_with_siblings(all[0], s, "allOf"), hint, path + "/allOf/0");
      }
    }
    if (!s.contains("type")) {
      if (s.contains("properties")) return visit_object(s, hint, path);
      if (s.contains("items") || s.contains("prefixItems")) return visit_array(s, hint, path);
      return std::string("json-value");
    }
    const json& t = s["type"];
    if (t.is_array()) {
      if (t.empty()) return bad(path + "/type", "empty type list");
      std::string out = "(";
      for (size_t i = 0; i < t.size(); ++i) {
        json one = s;
        one["type"] = t[i];
        LOOM_ASSIGN_OR_RETURN(std::string a, visit(one, hint, path));
        out += (i ? " | " : "") + a;
      }
      return out + ")";
    }
    if (!t.is_string()) return bad(path + "/type", "expected a string or a list of strings");
    const std::string type = t.get<std::string>();
    if (type == "object") return visit_object(s, hint, path);
    if (type == "array") return visit_array(s, hint, path);
    if (type == "string") return visit_string(s, hint, path);
    if (type == "integer") return visit_integer(s, path);
    if (type == "number") return visit_number(s, path);
    if (type == "boolean") return std::string("json-bool");
    if (type == "null") return std::string("json-null");
    return bad(path + "/type", "unknown type '" + type + "'");
  }

  // anyOf: [{...}, {...}] next to "type" and friends: each branch sees its siblings.
  static json merged_with_siblings(const json& branch, const json& parent, const char* key) {
    if (!branch.is_object()) return branch;
    json out = parent;
    out.erase(key);
    for (auto it = branch.begin(); it != branch.end(); ++it) out[it.key()] = it.value();
    return out;
  }

  Result<std::string> visit_ref(const json& s, const std::string& path) {
    if (!s["$ref"].is_string()) return bad(path + "/$ref", "expected a string");
    const std::string ref = s["$ref"].get<std::string>();
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') {
      if (!strict_) return std::string("json-value");
      return refuse(path, "$ref", "only refers inside the schema (#…), not to '" + ref + "'");
    }
    json::json_pointer ptr;
    try {
      ptr = json::json_pointer(ref.substr(1));
    } catch (const std::exception&) {
      return bad(path + "/$ref", "malformed reference '" + ref + "'");
    }
    if (!root_.contains(ptr)) return bad(path + "/$ref", "'" + ref + "' points at nothing");
    std::string hint = ref.size() > 1 ? ref.substr(ref.rfind('/') + 1) : "root";
    std::string name = new_rule("ref-" + hint, "");
    ref_rules_[ref] = name;  // before visiting: recursive schemas refer to the rule
    LOOM_ASSIGN_OR_RETURN(std::string body, visit(root_.at(ptr), hint, ref));
    rules_[name] = body;
    return name;
  }

  Result<std::string> visit_string(const json& s, const std::string& hint, const std::string& path) {
    if (s.contains("format")) {
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      static const std::map<std::string, std::string> formats = {
          {"date", "json-date"}, {"time", "json-time"}, {"date-time", "json-date \"T\" json-time"}, {"uuid", "json-uuid"}};
      auto it = formats.find(f);
      if (it != formats.end()) return "\"\\\"\" " + it->second + " \"\\\"\"";
      if (strict_) return refuse(path, "format", "'" + f + "' is not supported (date, time, date-time, uuid are)");
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return bad(path + "/pattern", "expected a string");
      RegexOptions o;
      o.json_string_safe = true;
      auto expr = regex_to_gbnf(s["pattern"].get<std::string>(), o);
      if (!expr.ok()) return bad(path + "/pattern", expr.status().message());
      return "\"\\\"\" " + *expr + " \"\\\"\"";
    }
    int64_t min = 0, max = -1;
    if (s.contains("minLength")) {
      if (!s["minLength"].is_number_unsigned()) return bad(path + "/minLength", "expected a non-negative integer");
      min = s["minLength"].get<int64_t>();
    }
    if (s.contains("maxLength")) {
      if (!s["maxLength"].is_number_unsigned()) return bad(path + "/maxLength", "expected a non-negative integer");
      max = s["maxLength"].get<int64_t>();
    }
    if (max >= 0 && max < min) return bad(path, "maxLength below minLength");
    if (min > 10000 || max > 10000) return refuse(path, min > 10000 ? "minLength" : "maxLength", "above 10000 is not supported");
    if (min == 0 && max < 0) return std::string("json-string");
    std::string rep = "{" + std::to_string(min) + "," + (max >= 0 ? std::to_string(max) : "") + "}";
    return "\"\\\"\" json-char" + rep + " \"\\\"\"";
  }

  Result<std::string> visit_integer(const json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* key, int64_t adjust, bool is_min) -> Status {
      if (!s.contains(key)) return Status::Ok();
      const json& v = s[key];
      if (!v.is_number()) return bad(path + "/" + key, "expected a number");
      double d = v.get<double>();
      if (d > 1e15 || d < -1e15) return refuse(path, key, "beyond ±1e15 is not supported");
      int64_t b = is_min ? static_cast<int64_t>(std::ceil(d)) : static_cast<int64_t>(std::floor(d));
      if (adjust != 0 && static_cast<double>(b) == d) b += adjust;
      if (is_min) lo = lo ? std::max(*lo, b) : b;
      else hi = hi ? std::min(*hi, b) : b;
      return Status::Ok();
    };
    LOOM_RETURN_IF_ERROR(bound("minimum", 0, true));
    LOOM_RETURN_IF_ERROR(bound("exclusiveMinimum", 1, true));
    LOOM_RETURN_IF_ERROR(bound("maximum", 0, false));
    LOOM_RETURN_IF_ERROR(bound("exclusiveMaximum", -1, false));
    if (!lo && !hi) return std::string("json-int");
    if (lo && hi && *lo > *hi) return bad(path, "the integer range is empty");
    return integer_range_gbnf(lo, hi);
  }

  // Bounded numbers are written without an exponent, at most 16 decimal places.
  Result<std::string> visit_number(const json& s, const std::string& path) {
    struct Key {
      const char* name;
      bool lower, exclusive;
    };
    std::optional<NumberBound> lo, hi;
    const char *lo_key = nullptr, *hi_key = nullptr;
    for (const Key k : {Key{"minimum", true, false}, Key{"exclusiveMinimum", true, true}, Key{"maximum", false, false},
                        Key{"exclusiveMaximum", false, true}}) {
      if (!s.contains(k.name)) continue;
      const json& v = s[k.name];
      if (!v.is_number()) return bad(path + "/" + k.name, "expected a number");
      const NumberBound b{v.get<double>(), k.exclusive};
      std::optional<NumberBound>& side = k.lower ? lo : hi;
      // the tighter of minimum and exclusiveMinimum (and of the maxima)
      if (!side || (k.lower ? b.value > side->value : b.value < side->value) || (b.value == side->value && b.exclusive)) {
        side = b;
        (k.lower ? lo_key : hi_key) = k.name;
      }
    }
    if (!lo && !hi) return std::string("json-number");
    for (auto [bound, key] : {std::pair{&lo, lo_key}, std::pair{&hi, hi_key}}) {
      if (!*bound) continue;
      Status st = check_number_bound((*bound)->value);
      if (st.ok()) continue;
      if (strict_) return refuse(path, key, st.message());
      bound->reset();  // lax: an unsupported bound is ignored like an unsupported keyword
    }
    if (!lo && !hi) return std::string("json-number");
    Result<std::string> range = number_range_gbnf(lo, hi);
    if (!range.ok()) return bad(path, range.status().message());
    return range;
  }

  Result<std::string> visit_array(const json& s, const std::string& hint, const std::string& path) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      const json& p = s["prefixItems"];
      if (!p.is_array()) return bad(path + "/prefixItems", "expected an array");
      for (size_t i = 0; i < p.size(); ++i) {
        LOOM_ASSIGN_OR_RETURN(std::string e, visit(p[i], hint + "-" + std::to_string(i), path + "/prefixItems/" + std::to_string(i)));
        prefix.push_back(e);
      }
    }
    std::string item = "json-value";
    bool more_allowed = true;
    if (s.contains("items")) {
      if (s["items"].is_boolean() && !s["items"].get<bool>()) {
        more_allowed = false;
      } else {
        LOOM_ASSIGN_OR_RETURN(item, visit(s["items"], hint + "-item", path + "/items"));
        if (item.find(' ') != std::string::npos) item = new_rule(hint + "-item", item);
      }
    }
    int64_t min = 0, max = -1;
    if (s.contains("minItems")) {
      if (!s["minItems"].is_number_unsigned()) return bad(path + "/minItems", "expected a non-negative integer");
      min = s["minItems"].get<int64_t>();
    }
    if (s.contains("maxItems")) {
      if (!s["maxItems"].is_number_unsigned()) return bad(path + "/maxItems", "expected a non-negative integer");
      max = s["maxItems"].get<int64_t>();
    }
    if (max >= 0 && max < min) return bad(path, "maxItems below minItems");
    if (min > 1000 || max > 1000) return refuse(path, min > 1000 ? "minItems" : "maxItems", "above 1000 is not supported");
    const int64_t n_prefix = static_cast<int64_t>(prefix.size());
    if (!more_allowed) max = max < 0 ? n_prefix : std::min(max, n_prefix);
    if (max >= 0 && max < min) return bad(path, "minItems cannot be met with items false");
    // Element k (0-based) is prefix[k] while k < n_prefix, else `item`. Built from the
    // right: `tail` is what may follow once k elements are written, starting at k0 —
    // past the prefix, the minimum and the first element — where only repetitions of
    // `item` remain.
    const std::string sep = "ws \",\" ws ";
    auto element = [&](int64_t k) { return k < n_prefix ? prefix[k] : item; };
    std::string body;
    if (max != 0) {
      int64_t k0 = std::max<int64_t>({n_prefix, min, 1});
      if (max >= 0) k0 = std::min(k0, max);
      std::string tail;
      if (max < 0) {
        tail = "(" + sep + item + ")*";
      } else if (max > k0) {
        tail = "(" + sep + item + "){0," + std::to_string(max - k0) + "}";
      }
      for (int64_t k = k0 - 1; k >= 1; --k) {
        std::string step = sep + element(k) + (tail.empty() ? "" : " " + tail);
        tail = k >= min ? "(" + step + ")?" : step;
        if (tail.size() > 200) tail = new_rule(hint + "-tail", tail);
      }
      body = element(0) + (tail.empty() ? "" : " " + tail);
      if (min == 0) body = "(" + body + ")?";
    }
    return new_rule(hint, "\"[\" ws " + body + (body.empty() ? "" : " ") + "ws \"]\"");
  }

  // Keys of extra properties: any JSON string but the declared keys (which would
  // otherwise repeat a declared property with a value its schema does not allow).
  // A trie of the declared keys' characters; leaving it anywhere makes a new key.
  std::string key_excluding(const std::vector<std::string>& keys, const std::string& hint) {
    struct TrieNode {
      std::map<uint32_t, int> next;
      bool terminal = false;
    };
    std::vector<TrieNode> trie(1);
    for (const std::string& k : keys) {
      int n = 0;
      for (uint32_t c : codepoints(k)) {
        auto it = trie[n].next.find(c);
        if (it == trie[n].next.end()) {
          trie.push_back({});
          it = trie[n].next.emplace(c, static_cast<int>(trie.size()) - 1).first;
        }
        n = it->second;
      }
      trie[n].terminal = true;
    }
    std::vector<std::string> names(trie.size());
    for (size_t i = 0; i < trie.size(); ++i) names[i] = new_rule(hint + "-key" + std::to_string(i), "");
    auto cp = [](uint32_t c) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\U%08X", c);
      return std::string(buf);
    };
    for (size_t i = 0; i < trie.size(); ++i) {
      std::string leave = "[^\"\\\\\\x00-\\x1F\\x7F";
      for (const auto& [c, _] : trie[i].next) leave += cp(c);
      leave += "]";
      std::vector<std::string> alts;
      if (!trie[i].terminal) alts.push_back("\"\\\"\"");
      alts.push_back(leave + " json-char* \"\\\"\"");
      alts.push_back("\"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) json-char* \"\\\"\"");
      for (const auto& [c, child] : trie[i].next) alts.push_back("[" + cp(c) + "] " + names[child]);
      std::string body;
      for (size_t a = 0; a < alts.size(); ++a) body += (a ? " | " : "") + alts[a];
      rules_[names[i]] = body;
    }
    return "\"\\\"\" " + names[0];
  }

  static std::vector<uint32_t> codepoints(const std::string& s) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      uint32_t v = len == 1 ? c : c & (0x7F >> len);
      for (int k = 1; k < len && i + k < s.size(); ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      out.push_back(v);
      i += len;
    }
    return out;
  }

  Result<std::string> visit_object(const json& s, const std::string& hint, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> props;  // key, member expression
    std::vector<bool> required;
    std::set<std::string> req;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return bad(path + "/required", "expected an array of names");
      for (const json& r : s["required"]) {
        if (!r.is_string()) return bad(path + "/required", "expected an array of names");
        req.insert(r.get<std::string>());
      }
    }
    std::vector<std::string> keys;
    if (s.contains("properties")) {
      const json& p = s["properties"];
      if (!p.is_object()) return bad(path + "/properties", "expected an object");
      for (auto it = p.begin(); it != p.end(); ++it) {
        LOOM_ASSIGN_OR_RETURN(std::string v, visit(it.value(), hint + "-" + it.key(), path + "/properties/" + it.key()));
        const std::string member = gbnf_literal(json(it.key()).dump()) + " ws \":\" ws " + v;
        props.emplace_back(it.key(), new_rule(hint + "-" + it.key() + "-kv", member));
        required.push_back(req.count(it.key()) > 0);
        keys.push_back(it.key());
      }
    }
    for (const std::string& r : req) {
      if (std::find(keys.begin(), keys.end(), r) == keys.end()) {
        if (strict_) return bad(path + "/required", "'" + r + "' is required but not among the properties");
      }
    }
    std::string extra;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        LOOM_ASSIGN_OR_RETURN(std::string v, a.is_boolean() ? Result<std::string>(std::string("json-value"))
                                                             : visit(a, hint + "-extra", path + "/additionalProperties"));
        std::string key = keys.empty() ? std::string("json-string") : key_excluding(keys, hint);
        extra = new_rule(hint + "-extra-kv", key + " ws \":\" ws " + v);
      }
    }
    // first(k): members from index k on when none is written yet; rest(k): the same
    // after at least one (so each needs a leading comma).
    const std::string sep = "ws \",\" ws ";
    const size_t n = props.size();
    std::string rest = extra.empty() ? "" : "(" + sep + extra + ")*";
    std::string first = extra.empty() ? "" : "(" + extra + (rest.empty() ? "" : " " + rest) + ")?";
    for (size_t k = n; k-- > 0;) {
      const std::string& m = props[k].second;
      std::string with = m + (rest.empty() ? "" : " " + rest);
      std::string new_first = required[k] ? with : (first.empty() ? "(" + with + ")?" : "(" + with + " | " + first + ")");
      std::string new_rest = required[k] ? sep + with : "(" + sep + m + ")?" + (rest.empty() ? "" : " " + rest);
      first = new_rule(hint + "-first", new_first.empty() ? "\"\"" : new_first);
      rest = new_rule(hint + "-rest", new_rest);
    }
    return new_rule(hint, "\"{\" ws " + (first.empty() ? std::string() : first + " ") + "ws \"}\"");
  }

  const json& root_;
  bool strict_;
  int depth_ = 0;
  std::map<std::string, std::string> rules_;
  std::map<std::string, int> next_suffix_;  // new_rule's next "-N" per base name (from 2)
  std::map<std::string, std::string> ref_rules_;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(std::string_view schema_json, bool strict) {
  json schema;
  try {
    schema = json::parse(schema_json);
  } catch (const json::parse_error& e) {
    return parse_error(std::string("JSON Schema: not valid JSON: ") + e.what());
  }
  return SchemaConverter(schema, strict).convert();
}

Result<Grammar> json_schema_to_grammar(std::string_view schema_json, bool strict) {
  LOOM_ASSIGN_OR_RETURN(std::string gbnf, json_schema_to_gbnf(schema_json, strict));
  auto g = parse_gbnf(gbnf);
  const ErrorCode code = g.ok() ? ErrorCode::kOk : g.status().code();
  if (code == ErrorCode::kTimeout || code == ErrorCode::kCancelled || code == ErrorCode::kResourceExhausted)
    return g.status();  // the compile budget ran out, not a converter bug
  if (!g.ok()) return internal_error("JSON Schema produced a grammar loom cannot parse: " + g.status().message());
  return g;
}

std::string any_json_gbnf() { return std::string("root ::= json-object\n") + kPrimitives; }

Result<Grammar> any_json_grammar() { return parse_gbnf(any_json_gbnf()); }

}  // namespace loom::structured
