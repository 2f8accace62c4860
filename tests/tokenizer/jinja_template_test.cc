// Hand-checked cases for the Jinja engine: options, value formatting, error
// messages (construct + line/column) and robustness. Broad feature parity with
// jinja2 is checked in chat_template_reference_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "loom/tokenizer/jinja/template.h"
#include "loom/tokenizer/jinja/value.h"

namespace loom::jinja {
namespace {

std::string render(const std::string& source, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object(),
                   TemplateOptions options = {}) {
  auto t = Template::parse(source, options);
  if (!t.ok()) return "PARSE ERROR: " + t.status().to_string();
  auto r = t->render(Value::from_json(ctx));
  if (!r.ok()) return "RENDER ERROR: " + r.status().to_string();
  return *r;
}

std::string parse_error_of(const std::string& source) {
  auto t = Template::parse(source);
  if (t.ok()) return "(parsed fine)";
  EXPECT_EQ(t.status().code(), ErrorCode::kParseError);
  return t.status().message();
}

std::string render_error_of(const std::string& source, const nlohmann::ordered_json& ctx = nlohmann::ordered_json::object()) {
  auto t = Template::parse(source);
  if (!t.ok()) return "(parse failed: " + t.status().message() + ")";
  auto r = t->render(Value::from_json(ctx));
  if (r.ok()) return "(rendered fine: " + *r + ")";
  return r.status().message();
}

TEST(JinjaTemplate, RendersTextExpressionsAndStatements) {
  EXPECT_EQ(render("Hello {{ name }}!", {{"name", "world"}}), "Hello world!");
  EXPECT_EQ(render("{% for x in xs %}{{ x }}{% if not loop.last %}, {% endif %}{% endfor %}", {{"xs", {1, 2, 3}}}),
            "1, 2, 3");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{{ 'a' if x else 'b' }}", {{"x", false}}), "b");
}

TEST(JinjaTemplate, WhitespaceOptionsFollowTheSettings) {
  const std::string src = "<\n  {% if true %}\n  x\n  {% endif %}\n>\n";
  // Transformers' settings: block lines vanish; one trailing newline dropped.
  EXPECT_EQ(render(src), "<\n  x\n>");
  TemplateOptions plain;
  plain.trim_blocks = false;
  plain.lstrip_blocks = false;
  EXPECT_EQ(render(src, nlohmann::ordered_json::object(), plain), "<\n  \n  x\n  \n>");
  plain.keep_trailing_newline = true;
  EXPECT_EQ(render(src, nlohmann::ordered_json::object(), plain), "<\n  \n  x\n  \n>\n");
}

TEST(JinjaTemplate, PythonValueFormatting) {
  EXPECT_EQ(format_python_float(1.0), "1.0");
  EXPECT_EQ(format_python_float(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(format_python_float(1e16), "1e+16");
  EXPECT_EQ(format_python_float(1e15), "1000000000000000.0");
  EXPECT_EQ(format_python_float(1e-5), "1e-05");
  EXPECT_EQ(format_python_float(0.0001), "0.0001");
  EXPECT_EQ(format_python_float(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(python_string_repr("it's"), "\"it's\"");
  EXPECT_EQ(python_string_repr("a'\"b"), "'a\\'\"b'");
  EXPECT_EQ(python_string_repr("tab\there\x01"), "'tab\\there\\x01'");
  EXPECT_EQ(python_string_repr("caf\xC3\xA9"), "'caf\xC3\xA9'");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 2.0, {'k': (1,)}] }}"), "[1, 'a', None, True, 2.0, {'k': (1,)}]");
}

TEST(JinjaTemplate, JsonKeepsInsertionOrderAndPythonSpacing) {
  nlohmann::ordered_json ctx;
  ctx["d"] = nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, null, 1.5], "m": "\u00fc\n"})");
  EXPECT_EQ(render("{{ d|tojson }}", ctx), "{\"z\": 1, \"a\": [true, null, 1.5], \"m\": \"\xC3\xBC\\n\"}");
  EXPECT_EQ(render("{{ d.a|tojson(indent=2) }}", ctx), "[\n  true,\n  null,\n  1.5\n]");
  EXPECT_EQ(render("{{ d|tojson(sort_keys=true) }}", ctx), "{\"a\": [true, null, 1.5], \"m\": \"\xC3\xBC\\n\", \"z\": 1}");
}

TEST(JinjaTemplate, SyntaxErrorsNameTheConstructAndPosition) {
  std::string m = parse_error_of("line one\n{{ x | nope }}");
  EXPECT_NE(m.find("unknown filter 'nope'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2, column 8"), std::string::npos) << m;

  m = parse_error_of("{% if x %}\nunterminated");
  EXPECT_NE(m.find("unclosed 'if'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 1"), std::string::npos) << m;

  m = parse_error_of("a\n\n{% for x in y %}{% endif %}");
  EXPECT_NE(m.find("unknown tag 'endif'"), std::string::npos) << m;
  EXPECT_NE(m.find("line 3"), std::string::npos) << m;

  m = parse_error_of("{{ x is nonsense }}");
  EXPECT_NE(m.find("unknown test 'nonsense'"), std::string::npos) << m;

  m = parse_error_of("{% include 'other.jinja' %}");
  EXPECT_NE(m.find("unsupported tag 'include'"), std::string::npos) << m;

  m = parse_error_of("{% do x.append(1) %}");
  EXPECT_NE(m.find("unsupported tag 'do'"), std::string::npos) << m;

  m = parse_error_of("{{ 1 + }}");
  EXPECT_NE(m.find("unexpected '}}'"), std::string::npos) << m;

  m = parse_error_of("{{ 'never closed }}");
  EXPECT_NE(m.find("unterminated string"), std::string::npos) << m;

  m = parse_error_of("text {{ x ");
  EXPECT_NE(m.find("expected '}}'"), std::string::npos) << m;

  m = parse_error_of("{# comment without end");
  EXPECT_NE(m.find("missing end of comment"), std::string::npos) << m;

  m = parse_error_of("{% break %}");
  EXPECT_NE(m.find("'break' outside of a for loop"), std::string::npos) << m;

  m = parse_error_of("{{ (1, 2]) }}");
  EXPECT_NE(m.find("unexpected ']', expected ')'"), std::string::npos) << m;

  m = parse_error_of("{% for x in xs recursive %}{% endfor %}");
  EXPECT_NE(m.find("recursive for loops are not supported"), std::string::npos) << m;
}

TEST(JinjaTemplate, RuntimeErrorsNameTheLine) {
  std::string m = render_error_of("ok\n{{ missing.attr }}");
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  EXPECT_NE(m.find("'missing' is undefined"), std::string::npos) << m;

  m = render_error_of("{% for m in messages %}\n{{ m.content + 1 }}{% endfor %}",
                      {{"messages", {{{"content", "x"}}}}});
  EXPECT_NE(m.find("line 2"), std::string::npos) << m;
  EXPECT_NE(m.find("can only concatenate str (not \"int\") to str"), std::string::npos) << m;

  m = render_error_of("{% set l = [] %}{{ l.append(1) }}");
  EXPECT_NE(m.find("access to attribute 'append' of 'list' object is unsafe"), std::string::npos) << m;

  m = render_error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_NE(m.find("recursion"), std::string::npos) << m;
}

TEST(JinjaTemplate, TemplateRaisedErrorsCarryTheTemplatesMessage) {
  auto t = Template::parse("{{ raise_exception('Only user and assistant roles are supported!') }}");
  ASSERT_TRUE(t.ok());
  auto ctx = std::make_shared<Dict>();
  ctx->set(Value("raise_exception"), Value::function("raise_exception", [](CallArgs& a) -> Value {
             throw TemplateException(a.positional.at(0).to_str());
           }));
  auto r = t->render(Value(ctx));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("Only user and assistant roles are supported!"), std::string::npos);
}

TEST(JinjaTemplate, BadContentNeverCrashes) {
  // Invalid UTF-8, deep nesting and huge ranges give output or an error.
  EXPECT_EQ(render("{{ s|length }}{{ s[1] }}{{ s|upper }}", {{"s", std::string("a\xff\xfe")}}),
            "3\xEF\xBF\xBD" "A\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_NE(render_error_of("{{ range(1000000)|length }}").find("Range too big"), std::string::npos);
  EXPECT_NE(render_error_of("{{ 9223372036854775807 + 1 }}").find("integer overflow"), std::string::npos);
  EXPECT_NE(render_error_of("{{ 1 // 0 }}").find("division or modulo by zero"), std::string::npos);
  EXPECT_EQ(render("{{ x }}", nlohmann::ordered_json::parse("[1]")).rfind("RENDER ERROR", 0), 0u);
}

TEST(JinjaTemplate, HostileInputIsBoundedNotFatal) {
  EXPECT_NE(parse_error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").find("nests too deeply"),
            std::string::npos);
  std::string deep_ifs;
  for (int i = 0; i < 1000; ++i) deep_ifs += "{% if true %}";
  EXPECT_NE(parse_error_of(deep_ifs).find("nests too deeply"), std::string::npos);
  EXPECT_NE(render_error_of("{{ 'ab' * 1000000000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(render_error_of("{{ '%999999999999s' % 'x' }}").find("too wide"), std::string::npos);
  nlohmann::ordered_json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = nlohmann::ordered_json::array({deep});
  EXPECT_THROW(Value::from_json(deep), RenderError);
  // Python pads %s by code point.
  EXPECT_EQ(render("[{{ '%-4s|%4s|%.2s' % ('\u00e9', '\u00e9', '\u00e9\u00e9\u00e9') }}]"),
            "[\xC3\xA9   |   \xC3\xA9|\xC3\xA9\xC3\xA9]");
}

// Random edits of the real chat templates: every result must be a template or
// a parse error, and every render a string or an error — never a crash.
TEST(JinjaTemplate, MutatedRealTemplatesNeverCrash) {
  const std::string dir = std::string(LOOM_SOURCE_DIR) + "/tests/reference/chat_templates/templates";
  std::vector<std::string> sources;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path());
    std::stringstream ss;
    ss << in.rdbuf();
    sources.push_back(ss.str());
  }
  ASSERT_GE(sources.size(), 10u);
  nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
    "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                 {"role": "assistant", "content": "a", "tool_calls": [{"type": "function",
                   "function": {"name": "f", "arguments": {"x": 1}}}]},
                 {"role": "tool", "content": "r"}, {"role": "user", "content": "u2"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  const Value context = Value::from_json(ctx);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~*/ \nxif0";
  std::mt19937 rng(1234);
  int parsed = 0, rendered = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src = sources[iter % sources.size()];
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !src.empty(); ++e) {
      const size_t pos = rng() % src.size();
      switch (rng() % 3) {
        case 0: src.erase(pos, 1 + rng() % 4); break;
        case 1: src.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
        default: src[pos] = alphabet[rng() % alphabet.size()]; break;
      }
    }
    auto t = Template::parse(src);
    if (!t.ok()) {
      EXPECT_FALSE(t.status().message().empty());
      continue;
    }
    ++parsed;
    auto r = t->render(context);
    if (r.ok()) ++rendered;
    else EXPECT_NE(r.status().code(), ErrorCode::kInternal) << r.status().to_string();
  }
  // The mutations must leave plenty of templates that still parse and render.
  EXPECT_GT(parsed, 300);
  EXPECT_GT(rendered, 100);
}

TEST(JinjaTemplate, ParsedTemplateIsReusableAcrossThreads) {
  auto t = Template::parse(
      "{% set ns = namespace(total=0) %}{% for i in range(n) %}{% set ns.total = ns.total + i %}{% endfor %}"
      "{{ ns.total }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::string> results(8);
  std::vector<std::thread> threads;
  for (int k = 0; k < 8; ++k) {
    threads.emplace_back([&, k] {
      nlohmann::ordered_json ctx{{"n", 100 + k}};
      for (int rep = 0; rep < 20; ++rep) results[k] = t->render(Value::from_json(ctx)).value();
    });
  }
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) {
    const int n = 100 + k;
    EXPECT_EQ(results[k], std::to_string(n * (n - 1) / 2));
  }
}

}  // namespace
}  // namespace loom::jinja
