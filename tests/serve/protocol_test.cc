// The server's request parsing: every field typed and ranged, errors naming the
// field, unknown fields ignored; and the Prometheus page's shape.
#include "serve/protocol.h"

#include <gtest/gtest.h>

#include "serve/metrics.h"

namespace loom::serve {
namespace {

TEST(Protocol, CompletionFieldsAreRead) {
  Parsed<CompletionRequest> p = parse_completion_request(R"({
    "model": "m", "prompt": ["a", "b"], "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": -1,
    "min_p": 0.1, "repetition_penalty": 1.1, "presence_penalty": -1, "frequency_penalty": 2, "seed": -3,
    "stop": "x", "n": 2, "stream": true, "stream_options": {"include_usage": true}, "echo": true,
    "logprobs": 3, "logit_bias": {"12": -100, "7": 4.5}, "user": "u", "unknown": {"deep": [1]}})");
  ASSERT_TRUE(p.ok()) << p.error.message;
  const CompletionRequest& r = *p.value;
  EXPECT_EQ(*r.model, "m");
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(*r.prompts[1].text, "b");
  EXPECT_EQ(*r.max_tokens, 7);
  EXPECT_FLOAT_EQ(*r.temperature, 0.5f);
  EXPECT_EQ(*r.top_k, -1);
  EXPECT_EQ(*r.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.n, 2);
  EXPECT_TRUE(r.stream && r.include_usage && r.echo);
  EXPECT_EQ(*r.logprobs, 3);
  ASSERT_EQ(r.logit_bias.size(), 2u);
  EXPECT_EQ(r.logit_bias[0].first, 12);
  EXPECT_FLOAT_EQ(r.logit_bias[0].second, -100.0f);
}

TEST(Protocol, PromptShapes) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": [1, 2, 3]})").value->prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  auto lists = parse_completion_request(R"({"prompt": [[1], [2, 3]]})");
  ASSERT_TRUE(lists.ok());
  EXPECT_EQ(lists.value->prompts.size(), 2u);
  for (const char* bad : {R"({"prompt": []})", R"({"prompt": [[1], "x"]})", R"({"prompt": ["x", 1]})",
                          R"({"prompt": [[]]})", R"({"prompt": 5})", R"({"prompt": [1.5]})", R"({})"}) {
    auto p = parse_completion_request(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.error.param, "prompt") << bad;
    EXPECT_EQ(p.error.status, 400);
  }
}

TEST(Protocol, ErrorsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": "x", "temperature": 3})", "temperature"},
           {R"({"prompt": "x", "temperature": "warm"})", "temperature"},
           {R"({"prompt": "x", "top_p": 0})", "top_p"},
           {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
           {R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens"},
           {R"({"prompt": "x", "n": 200})", "n"},
           {R"({"prompt": "x", "stream": "yes"})", "stream"},
           {R"({"prompt": "x", "stop": ""})", "stop"},
           {R"({"prompt": "x", "logit_bias": {"1": 200}})", "logit_bias"},
           {R"({"prompt": "x", "logit_bias": {"-1": 2}})", "logit_bias"},
           {R"({"prompt": "x", "suffix": "s"})", "suffix"},
           {R"({"prompt": "x", "user": 5})", "user"},
           {R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty"},
       }) {
    auto p = parse_completion_request(c.body);
    EXPECT_FALSE(p.ok()) << c.body;
    EXPECT_EQ(p.error.param, c.param) << c.body << ": " << p.error.message;
    EXPECT_NE(p.error.message.find(c.param), std::string::npos) << p.error.message;
  }
  // null means unset, as in OpenAI's SDKs.
  EXPECT_TRUE(parse_completion_request(R"({"prompt": "x", "temperature": null, "suffix": null})").ok());
  // max_tokens 16.0 is an integer.
  EXPECT_EQ(*parse_completion_request(R"({"prompt": "x", "max_tokens": 16.0})").value->max_tokens, 16);
}

TEST(Protocol, MalformedBodiesAre400) {
  for (const char* bad : {"", "{", "[]", "\"x\"", "{\"prompt\": \"\xff\xfe\"}", "nul"}) {
    auto p = parse_completion_request(bad);
    EXPECT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.error.status, 400);
  }
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  auto p = parse_completion_request("{\"prompt\": " + deep + "}");
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.error.message.find("deeper"), std::string::npos);
}

TEST(Protocol, ChatMessagesAreNormalized) {
  auto p = parse_chat_completion_request(R"({"messages": [
      {"role": "system", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "user", "content": "c", "name": "n"}, {"role": "assistant", "content": null}],
      "max_completion_tokens": 5, "logprobs": true, "top_logprobs": 2, "add_generation_prompt": false,
      "chat_template_kwargs": {"enable_thinking": false}})");
  ASSERT_TRUE(p.ok()) << p.error.message;
  const auto& m = p.value->messages;
  EXPECT_EQ(m[0]["content"], "a\nb");
  EXPECT_EQ(m[1]["name"], "n");
  EXPECT_EQ(m[2]["content"], "");
  EXPECT_EQ(*p.value->max_tokens, 5);
  EXPECT_FALSE(p.value->add_generation_prompt);
  EXPECT_EQ(p.value->chat_template_kwargs["enable_thinking"], false);
  for (const auto& [body, param] : std::vector<std::pair<const char*, const char*>>{
           {R"({"messages": []})", "messages"},
           {R"({"messages": [1]})", "messages[0]"},
           {R"({"messages": [{"role": 1}]})", "messages[0].role"},
           {R"({"messages": [{"role": "user", "content": 3}]})", "messages[0].content"},
           {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", "messages[0].content[0]"},
           {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 3})", "top_logprobs"},
           {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})", "chat_template_kwargs"},
       }) {
    auto q = parse_chat_completion_request(body);
    EXPECT_FALSE(q.ok()) << body;
    EXPECT_EQ(q.error.param, param) << body;
  }
}

TEST(Protocol, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(R"({"prompt": "x", "add_special_tokens": false, "return_token_strs": true})");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(*t.value->add_special_tokens);
  EXPECT_FALSE(parse_tokenize_request(R"({})").ok());
  EXPECT_FALSE(parse_tokenize_request(R"({"prompt": "x", "messages": [{"role": "user", "content": "y"}]})").ok());
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [1, 2]})").value->tokens.size(), 2u);
  EXPECT_EQ(parse_detokenize_request(R"({"tokens": [1, "a"]})").error.param, "tokens");
}

TEST(Metrics, PrometheusPageHasEveryNameWithTheModelLabel) {
  Metrics m("my \"model\"");
  FinishedSequence s;
  s.finished_reason = "stop";
  s.ttft_seconds = 0.03;
  s.inter_token_seconds = {0.01, 0.02};
  s.e2e_seconds = 0.2;
  s.queue_seconds = 0.001;
  m.record(s);
  batching::ManagerStats st;
  st.pages_capacity = 10;
  st.pages_in_use = 4;
  st.generated_tokens = 3;
  const std::string page = m.render(st, true);
  EXPECT_NE(page.find("loom:kv_cache_usage_perc{model_name=\"my \\\"model\\\"\"} 0.4"), std::string::npos) << page;
  EXPECT_NE(page.find("loom:request_success_total{model_name=\"my \\\"model\\\"\",finished_reason=\"stop\"} 1"), std::string::npos);
  EXPECT_NE(page.find("loom:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"0.04\"} 1"), std::string::npos);
  EXPECT_NE(page.find("loom:time_to_first_token_seconds_bucket{model_name=\"my \\\"model\\\"\",le=\"0.02\"} 0"), std::string::npos);
  EXPECT_NE(page.find("loom:inter_token_latency_seconds_count{model_name=\"my \\\"model\\\"\"} 2"), std::string::npos);
  for (const char* name : {"loom:num_requests_running", "loom:num_requests_waiting", "loom:prefix_cache_queries_total",
                           "loom:prefix_cache_hits_total", "loom:prompt_tokens_total", "loom:generation_tokens_total",
                           "loom:num_preemptions_total", "loom:e2e_request_latency_seconds", "loom:request_queue_time_seconds"}) {
    EXPECT_NE(page.find(std::string("# TYPE ") + name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace loom::serve
