// vLLM's POST /tokenize and /detokenize, and GET /v1/models.
#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

using json = nlohmann::ordered_json;

HttpResponse handle_tokenize(Engine& engine, const HttpRequest& req) {
  Parsed<TokenizeRequest> parsed = parse_tokenize_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const TokenizeRequest& r = *parsed.value;
  if (auto e = engine.check_model(r.model)) return error_response(*e);
  const Tokenizer* tok = engine.tokenizer();
  if (!tok) return error_response(bad_field("prompt", "the model has no tokenizer.json"));
  std::string text;
  bool special = true;
  if (r.messages) {
    const tok::ChatTemplate* tmpl = engine.chat_template();
    if (!tmpl) return error_response(bad_field("messages", "the model has no chat template"));
    Result<std::string> rendered = tmpl->apply(*r.messages, r.add_generation_prompt);
    if (!rendered.ok()) return error_response(bad_field("messages", "the chat template failed: " + rendered.status().message()));
    text = *rendered;
    special = r.add_special_tokens.value_or(false);
  } else {
    text = *r.prompt;
    special = r.add_special_tokens.value_or(true);
  }
  if (auto e = check_prompt_bytes(engine, text.size(), r.messages ? "messages" : "prompt")) return error_response(*e);
  Result<Encoding> enc = tok->encode(text, special);
  if (!enc.ok()) return error_response(from_status(enc.status(), r.messages ? "messages" : "prompt"));
  json out = {{"count", enc->ids.size()}, {"max_model_len", engine.max_model_len()}, {"tokens", enc->ids}};
  if (r.return_token_strs) {
    json strs = json::array();
    for (int32_t id : enc->ids) strs.push_back(tok->id_to_token(id).value_or(""));
    out["token_strs"] = strs;
  }
  return json_response(out);
}

HttpResponse handle_detokenize(Engine& engine, const HttpRequest& req) {
  Parsed<DetokenizeRequest> parsed = parse_detokenize_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const DetokenizeRequest& r = *parsed.value;
  if (auto e = engine.check_model(r.model)) return error_response(*e);
  const Tokenizer* tok = engine.tokenizer();
  if (!tok) return error_response(bad_field("tokens", "the model has no tokenizer.json"));
  if (auto e = check_ids(engine, r.tokens, "tokens")) return error_response(*e);
  Result<std::string> text = tok->decode(r.tokens, /*skip_special_tokens=*/false);
  if (!text.ok()) return error_response(from_status(text.status(), "tokens"));
  return json_response({{"prompt", *text}});
}

HttpResponse handle_models(Engine& engine, const HttpRequest&) {
  json model = {{"id", engine.served_model_name()},
                {"object", "model"},
                {"created", static_cast<int64_t>(engine.created_time())},
                {"owned_by", "loom"},
                {"root", engine.model_dir()},
                {"parent", nullptr},
                {"max_model_len", engine.max_model_len()}};
  return json_response({{"object", "list"}, {"data", json::array({model})}});
}

}  // namespace loom::serve
