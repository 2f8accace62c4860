// Renders a conversation with a model's chat template (the `chat_template` of
// tokenizer_config.json or chat_template.jinja) exactly as Transformers'
// tokenizer.apply_chat_template(messages, tokenize=False, ...) does.
//
// The template sees: messages, add_generation_prompt, tools and documents
// (None unless given), bos_token / eos_token (left undefined when empty, as
// Transformers omits unset special tokens), raise_exception(msg),
// strftime_now(fmt), and every key of `extra_variables` (tools, date_string,
// enable_thinking, …), which override the defaults.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/status.h"
#include "loom/tokenizer/jinja/template.h"

namespace loom::tok {

class ChatTemplate {
 public:
  // Parses the template once; syntax errors name the line and construct.
  static Result<ChatTemplate> create(std::string template_source, std::string bos_token, std::string eos_token);

  // `messages`: [{"role": ..., "content": ...}, ...] (any extra keys — tool_calls,
  // reasoning_content — are visible to the template). `extra_variables` must be
  // an object. ordered_json keeps the key order of tool schemas, which tojson
  // prints; nlohmann::json sorts keys, so prefer ordered_json for tools.
  Result<std::string> apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                            const nlohmann::ordered_json& extra_variables = nlohmann::ordered_json::object()) const;
  Result<std::string> apply(const nlohmann::json& messages, bool add_generation_prompt,
                            const nlohmann::json& extra_variables = nlohmann::json::object()) const;
  // The same with values already converted (messages: a list, extras: a dict).
  Result<std::string> apply(const jinja::Value& messages, bool add_generation_prompt,
                            const jinja::Value& extra_variables) const;

  // strftime_now() formats this clock's time (Unix seconds) in local time;
  // defaults to the system clock. Tests pin it to compare with a reference.
  void set_clock(std::function<int64_t()> unix_seconds_now) { clock_ = std::move(unix_seconds_now); }

  const std::string& source() const { return source_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate(std::string source, jinja::Template tmpl, std::string bos, std::string eos)
      : source_(std::move(source)), template_(std::move(tmpl)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}

  std::string source_;
  jinja::Template template_;
  std::string bos_token_;
  std::string eos_token_;
  std::function<int64_t()> clock_;
};

}  // namespace loom::tok
