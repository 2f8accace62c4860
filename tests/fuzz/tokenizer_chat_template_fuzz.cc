// A chat template (Jinja) from the fuzzer: parsing must succeed or name the
// construct, and rendering a fixed conversation (with tools and a system turn)
// must give text or a named error.
#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json& conversation() {
  static const auto messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4", "tool_calls": [
      {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
    {"role": "tool", "content": "4"},
    {"role": "user", "content": [{"type": "text", "text": "And 3+3?"}]}
  ])");
  return messages;
}

const nlohmann::ordered_json& extras() {
  static const auto vars = nlohmann::ordered_json::parse(R"({
    "tools": [{"type": "function", "function": {"name": "add", "description": "a+b",
               "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "enable_thinking": false
  })");
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tmpl = loom::tok::ChatTemplate::create(std::string(loom::fuzz::as_text(data, size)), "<s>", "</s>");
  if (!tmpl.ok()) return 0;
  tmpl->set_clock([] { return int64_t{1700000000}; });
  (void)tmpl->apply(conversation(), /*add_generation_prompt=*/true, extras());
  (void)tmpl->apply(nlohmann::ordered_json::array(), /*add_generation_prompt=*/false);
  return 0;
}
