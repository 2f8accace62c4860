#include "loom/tokenizer/chat_template.h"

#include <chrono>

#include "loom/tokenizer/jinja/builtins.h"

namespace loom::tok {

using jinja::Value;

Result<ChatTemplate> ChatTemplate::create(std::string template_source, std::string bos_token, std::string eos_token) {
  auto parsed = jinja::Template::parse(template_source);
  if (!parsed.ok()) return parsed.status().with_context("chat template");
  return ChatTemplate(std::move(template_source), std::move(parsed).value(), std::move(bos_token),
                      std::move(eos_token));
}

namespace {

template <typename Json>
Result<std::pair<Value, Value>> convert(const Json& messages, const Json& extra) {
  if (!messages.is_array()) {
    return invalid_argument(std::string("chat template: messages must be a JSON array, got ") + messages.type_name());
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) {
      return invalid_argument("chat template: messages[" + std::to_string(i) + "] must be an object, got " +
                              messages[i].type_name());
    }
  }
  if (!extra.is_null() && !extra.is_object()) {
    return invalid_argument(std::string("chat template: extra variables must be a JSON object, got ") +
                            extra.type_name());
  }
  try {
    return std::make_pair(Value::from_json(messages), extra.is_null() ? Value::empty_dict() : Value::from_json(extra));
  } catch (const jinja::RenderError& e) {
    return invalid_argument(std::string("chat template: ") + e.what());
  }
}

}  // namespace

Result<std::string> ChatTemplate::apply(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra_variables) const {
  LOOM_ASSIGN_OR_RETURN(auto values, convert(messages, extra_variables));
  return apply(values.first, add_generation_prompt, values.second);
}

Result<std::string> ChatTemplate::apply(const nlohmann::json& messages, bool add_generation_prompt,
                                        const nlohmann::json& extra_variables) const {
  LOOM_ASSIGN_OR_RETURN(auto values, convert(messages, extra_variables));
  return apply(values.first, add_generation_prompt, values.second);
}

Result<std::string> ChatTemplate::apply(const Value& messages, bool add_generation_prompt,
                                        const Value& extra_variables) const {
  if (!messages.is_list()) return invalid_argument("chat template: messages must be a list, got " + messages.type_name());
  if (!extra_variables.is_dict() && !extra_variables.is_undefined() && !extra_variables.is_none()) {
    return invalid_argument("chat template: extra variables must be a dict, got " + extra_variables.type_name());
  }
  auto ctx = std::make_shared<jinja::Dict>();
  ctx->set(Value("messages"), messages);
  ctx->set(Value("tools"), Value::none());
  ctx->set(Value("documents"), Value::none());
  ctx->set(Value("add_generation_prompt"), Value(add_generation_prompt));
  if (!bos_token_.empty()) ctx->set(Value("bos_token"), Value(bos_token_));
  if (!eos_token_.empty()) ctx->set(Value("eos_token"), Value(eos_token_));
  ctx->set(Value("raise_exception"), Value::function("raise_exception", [](jinja::CallArgs& a) -> Value {
             throw jinja::TemplateException(a.positional.empty() ? std::string() : a.positional[0].to_str());
           }));
  std::function<int64_t()> clock = clock_;
  ctx->set(Value("strftime_now"), Value::function("strftime_now", [clock](jinja::CallArgs& a) {
             a.check("strftime_now", 1, {"format"});
             const Value fmt = a.get(0, "format");
             if (!fmt.is_string()) throw jinja::RenderError("strftime_now() format must be str, not " + fmt.type_name());
             const int64_t now = clock ? clock()
                                       : std::chrono::duration_cast<std::chrono::seconds>(
                                             std::chrono::system_clock::now().time_since_epoch())
                                             .count();
             return Value(jinja::strftime_local(fmt.as_string(), now));
           }));
  if (extra_variables.is_dict()) {
    for (const auto& [k, v] : extra_variables.as_dict().entries) ctx->set(k, v);
  }
  auto rendered = template_.render(Value(std::move(ctx)));
  if (!rendered.ok()) return rendered.status().with_context("chat template");
  return rendered;
}

}  // namespace loom::tok
