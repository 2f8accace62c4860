// POST /v1/completions: OpenAI's legacy completions (text_completion objects),
// with echo, logprobs as top alternatives per token, n, and streaming.
#include <algorithm>

#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

namespace {

using json = nlohmann::ordered_json;

// OpenAI's legacy logprobs object for tokens[begin, end) of one choice. When
// `prompt` is set the range is the prompt's: its first token has no logprob.
struct LegacyLogprobs {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  size_t offset = 0;  // characters of text before the next token

  void add(const Engine& e, int32_t id, std::optional<float> lp, const std::vector<generation::TokenLogprob>* top) {
    const std::string text = token_text(e, id);
    tokens.push_back(text);
    token_logprobs.push_back(lp ? json(*lp) : json(nullptr));
    if (!lp) {
      top_logprobs.push_back(nullptr);
    } else {
      json alternatives = json::object();
      if (top)
        for (const generation::TokenLogprob& t : *top) {
          const std::string s = token_text(e, t.id);
          if (!alternatives.contains(s)) alternatives[s] = t.logprob;
        }
      if (!alternatives.contains(text)) alternatives[text] = *lp;
      top_logprobs.push_back(std::move(alternatives));
    }
    text_offset.push_back(offset);
    offset += text.size();
  }
  json to_json() const {
    return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs}, {"text_offset", text_offset}};
  }
};

void add_prompt_logprobs(LegacyLogprobs& lp, const Engine& e, const batching::GenerationOutput& o) {
  for (size_t i = 0; i < o.prompt_ids.size(); ++i) {
    std::optional<float> v;
    const std::vector<generation::TokenLogprob>* top = nullptr;
    if (i > 0 && i - 1 < o.prompt_logprobs.size()) {
      v = o.prompt_logprobs[i - 1];
      if (i - 1 < o.prompt_top_logprobs.size()) top = &o.prompt_top_logprobs[i - 1];
    }
    lp.add(e, o.prompt_ids[i], v, top);
  }
}

void add_generated_logprobs(LegacyLogprobs& lp, const Engine& e, const batching::GenerationOutput& o, size_t begin,
                            size_t end) {
  for (size_t i = begin; i < end && i < o.generated_tokens.size(); ++i) {
    std::optional<float> v;
    if (i < o.logprobs.size()) v = o.logprobs[i];
    lp.add(e, o.generated_tokens[i], v, i < o.top_logprobs.size() ? &o.top_logprobs[i] : nullptr);
  }
}

}  // namespace

HttpResponse handle_completions(Engine& engine, const HttpRequest& req) {
  Parsed<CompletionRequest> parsed = parse_completion_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const CompletionRequest& r = *parsed.value;
  if (auto e = engine.check_model(r.model)) return error_response(*e);

  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> prompt_texts;
  const Tokenizer* tok = engine.tokenizer();
  for (size_t p = 0; p < r.prompts.size(); ++p) {
    const PromptInput& in = r.prompts[p];
    const std::string param = r.prompts.size() > 1 ? "prompt[" + std::to_string(p) + "]" : "prompt";
    std::vector<int32_t> ids;
    std::string text;
    if (in.text) {
      if (!tok) return error_response(bad_field(param, "'" + param + "' is text, but the model has no tokenizer.json: give token ids"));
      if (auto e = check_prompt_bytes(engine, in.text->size(), param)) return error_response(*e);
      Result<Encoding> enc = tok->encode(*in.text, r.add_special_tokens);
      if (!enc.ok()) return error_response(from_status(enc.status(), param));
      ids = enc->ids;
      text = *in.text;
    } else {
      ids = in.ids;
      if (auto e = check_ids(engine, ids, param)) return error_response(*e);
      if (tok) {
        Result<std::string> d = tok->decode(ids, /*skip_special_tokens=*/false);
        if (d.ok()) text = *d;
      }
    }
    if (ids.empty()) return error_response(bad_field(param, "'" + param + "' is empty (it has no tokens)"));
    prompts.push_back(std::move(ids));
    prompt_texts.push_back(std::move(text));
  }
  const int64_t max_tokens = r.max_tokens.value_or(16);
  for (size_t p = 0; p < prompts.size(); ++p)
    if (auto e = check_context(engine, static_cast<int64_t>(prompts[p].size()), max_tokens)) {
      if (prompts.size() > 1) e->message = "prompt " + std::to_string(p) + ": " + e->message;
      return error_response(*e);
    }

  batching::RequestOptions o = request_options(r);
  o.max_new_tokens = max_tokens;
  o.streaming = r.stream;
  if (r.constraint)
    if (auto e = attach_constraint(engine, *r.constraint, &o, req.client_connected)) return error_response(*e);
  if (r.logprobs) {
    o.logprobs = true;
    o.top_logprobs = *r.logprobs;
    if (r.echo) o.prompt_logprobs = *r.logprobs;
  }
  Result<std::shared_ptr<Job>> submitted = engine.submit(prompts, r.n, o, "cmpl", req.received_time);
  if (!submitted.ok()) return error_response(from_status(submitted.status()));
  std::shared_ptr<Job> job = *submitted;

  const std::string id = response_id("cmpl", req);
  const int64_t created = unix_now();
  const std::string model = engine.served_model_name();
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  const int32_t n = r.n;
  auto usage = [prompt_tokens](int64_t completion) { return usage_json(prompt_tokens, completion); };

  if (!r.stream) {
    std::optional<std::vector<batching::GenerationOutput>> finals = collect_job(*job, req);
    if (!finals) return client_gone_response();
    return finished_response(*finals, req, id, "text_completion", model, prompt_tokens,
                             [&](size_t c, const batching::GenerationOutput& out) {
                               json logprobs = nullptr;
                               if (r.logprobs) {
                                 LegacyLogprobs lp;
                                 if (r.echo) add_prompt_logprobs(lp, engine, out);
                                 add_generated_logprobs(lp, engine, out, 0, out.generated_tokens.size());
                                 logprobs = lp.to_json();
                               }
                               const size_t p = c / static_cast<size_t>(n);
                               return json{{"text", (r.echo ? prompt_texts[p] : std::string()) + out.text},
                                           {"logprobs", logprobs}};
                             });
  }

  HttpResponse res;
  res.content_type = "text/event-stream";
  std::shared_ptr<RequestLog> log = res.log;
  const bool include_usage = r.include_usage;
  const bool echo = r.echo;
  const bool want_logprobs = r.logprobs.has_value();
  res.stream = [&engine, job, id, created, model, prompt_texts, n, include_usage, echo, want_logprobs, usage, log,
                received = req.received_time](EventSink& sink) {
    struct ChoiceState {
      size_t text_sent = 0, tokens_sent = 0;
      bool started = false;
      size_t offset = 0;  // characters sent, for text_offset
    };
    std::vector<ChoiceState> state(static_cast<size_t>(job->num_choices()));
    int64_t completion = 0;
    auto chunk = [&](int32_t choice, const std::string& text, json logprobs, json finish) {
      return sse_event({{"id", id},
                        {"object", "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array({{{"index", choice}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", finish}}})}});
    };
    auto on_output = [&](int32_t choice, const batching::GenerationOutput& o) {
      ChoiceState& s = state[static_cast<size_t>(choice)];
      std::string text;
      LegacyLogprobs lp;
      lp.offset = s.offset;
      if (!s.started) {
        s.started = true;
        if (log->ttft_seconds < 0 && !o.timestamps.empty()) log->ttft_seconds = o.timestamps[0] - received;
        if (echo) {
          text = prompt_texts[static_cast<size_t>(choice / n)];
          if (want_logprobs) add_prompt_logprobs(lp, engine, o);
        }
      }
      const size_t tokens = o.generated_tokens.size();
      if (o.text.size() > s.text_sent) text += o.text.substr(s.text_sent);
      if (want_logprobs) add_generated_logprobs(lp, engine, o, s.tokens_sent, tokens);
      s.text_sent = std::max(s.text_sent, o.text.size());
      const bool final = o.is_final();
      if (final) completion += static_cast<int64_t>(tokens);
      if (text.empty() && !final && tokens == s.tokens_sent) return true;
      s.tokens_sent = tokens;
      s.offset = lp.offset;
      if (final) log->outcome = finish_reason_label(o);
      return sink.write(chunk(choice, text, want_logprobs ? lp.to_json() : json(nullptr),
                              final ? json(finish_reason_label(o)) : json(nullptr)));
    };
    auto on_end = [&] {
      if (include_usage)
        sink.write(sse_event({{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", model},
                              {"choices", json::array()}, {"usage", usage(completion)}}));
    };
    if (!stream_job(*job, sink, on_output, on_end)) log->outcome = "client disconnected";
    log->completion_tokens = completion;
  };
  res.log->prompt_tokens = prompt_tokens;
  return res;
}

}  // namespace loom::serve
