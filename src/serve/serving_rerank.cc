// POST /v1/rerank (also /rerank, /v2/rerank): Jina's and Cohere's rerank shape, scored the
// way Qwen3-Reranker-style decoders are: each (query, document) pair is written in the
// reranker's prompt, which asks for "yes" or "no", and the score is the probability of
// "yes" against "no" at the answer's position, softmax([logit_no, logit_yes])[1] =
// sigmoid(logprob_yes - logprob_no). The log-probabilities come from prompt
// log-probabilities of the prompt followed by each answer; where the tokenizer spells an
// answer in several tokens, its log-probability is their sum (the word's probability),
// which is the same formula for one-token answers. Any causal LM can so rank; how well is
// the model's.
#include <algorithm>
#include <cmath>

#include "serve/protocol_messages.h"
#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

namespace {

using json = nlohmann::ordered_json;

constexpr const char* kRerankPrefix =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct "
    "provided. Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
constexpr const char* kRerankSuffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
constexpr const char* kDefaultInstruction = "Given a web search query, retrieve relevant passages that answer the query";

std::vector<int32_t> answer_tokens(const Tokenizer& tok, const std::string& word) {
  Result<Encoding> e = tok.encode(word, /*add_special_tokens=*/false);
  return e.ok() ? e->ids : std::vector<int32_t>{};
}

// The log-probability of the last `n` prompt tokens (the answer) given what precedes them.
double answer_logprob(const batching::GenerationOutput& o, size_t n) {
  double sum = 0;
  for (size_t k = 0; k < n && k < o.prompt_logprobs.size(); ++k) sum += o.prompt_logprobs[o.prompt_logprobs.size() - 1 - k];
  return sum;
}

std::string rerank_prompt(const std::string& instruction, const std::string& query, const std::string& document) {
  return std::string(kRerankPrefix) + "<Instruct>: " + instruction + "\n<Query>: " + query + "\n<Document>: " + document +
         kRerankSuffix;
}

// Each document's score against the query, in order; an error response instead when
// the pairs cannot be scored. `param` names the documents' field in errors.
std::optional<HttpResponse> score_documents(Engine& engine, const HttpRequest& req, const std::string& query,
                                            const std::vector<std::string>& documents, const std::string& instruction,
                                            const std::string& param, std::vector<double>* scores, int64_t* total_tokens) {
  const Tokenizer* tok = engine.tokenizer();
  if (!tok) return error_response(bad_field("model", "the model has no tokenizer"));
  const std::vector<int32_t> yes = answer_tokens(*tok, "yes"), no = answer_tokens(*tok, "no");
  if (yes.empty() || no.empty())
    return error_response(ApiError{500, "the tokenizer cannot encode the answers \"yes\" / \"no\"", "internal_error", "", ""});
  std::vector<std::vector<int32_t>> prompts;
  *total_tokens = 0;
  for (size_t i = 0; i < documents.size(); ++i) {
    const std::string where = param + "[" + std::to_string(i) + "]";
    const std::string text = rerank_prompt(instruction, query, documents[i]);
    if (auto e = check_prompt_bytes(engine, text.size(), where)) return error_response(*e);
    Result<Encoding> enc = tok->encode(text, /*add_special_tokens=*/false);
    if (!enc.ok()) return error_response(from_status(enc.status(), where));
    std::vector<int32_t> ids = enc->ids;
    const size_t longest = std::max(yes.size(), no.size());
    if (auto e = check_context(engine, static_cast<int64_t>(ids.size() + longest), 1)) {
      e->param = where;
      return error_response(*e);
    }
    *total_tokens += static_cast<int64_t>(ids.size());
    std::vector<int32_t> with_yes = ids;
    with_yes.insert(with_yes.end(), yes.begin(), yes.end());
    ids.insert(ids.end(), no.begin(), no.end());
    prompts.push_back(std::move(with_yes));
    prompts.push_back(std::move(ids));
  }
  batching::RequestOptions o;
  o.max_new_tokens = 1;
  o.do_sample = false;
  o.prompt_logprobs = 0;
  Result<std::shared_ptr<Job>> submitted = engine.submit(prompts, 1, o, "rerank", req.received_time);
  if (!submitted.ok()) return error_response(from_status(submitted.status()));
  std::optional<std::vector<batching::GenerationOutput>> finals = collect_job(**submitted, req);
  if (!finals) return client_gone_response();
  scores->clear();
  for (size_t i = 0; i < documents.size(); ++i) {
    const batching::GenerationOutput& y = (*finals)[2 * i];
    const batching::GenerationOutput& n = (*finals)[2 * i + 1];
    if (y.status != batching::RequestStatus::kFinished) return error_response(output_error(y));
    if (n.status != batching::RequestStatus::kFinished) return error_response(output_error(n));
    if (y.prompt_logprobs.size() < yes.size() || n.prompt_logprobs.size() < no.size())
      return error_response(ApiError{500, "the scoring requests returned no prompt log-probabilities", "internal_error", "", ""});
    const double diff = answer_logprob(n, no.size()) - answer_logprob(y, yes.size());
    scores->push_back(1.0 / (1.0 + std::exp(diff)));
  }
  return std::nullopt;
}

}  // namespace

HttpResponse handle_rerank(Engine& engine, const HttpRequest& req) {
  Parsed<RerankRequest> parsed = parse_rerank_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const RerankRequest& r = *parsed.value;
  if (auto e = engine.check_model(r.model)) return error_response(*e);
  std::vector<double> by_doc;
  int64_t total_tokens = 0;
  if (auto e = score_documents(engine, req, r.query, r.documents, r.instruction.value_or(kDefaultInstruction), "documents",
                               &by_doc, &total_tokens))
    return std::move(*e);
  std::vector<std::pair<double, size_t>> scores;
  for (size_t i = 0; i < by_doc.size(); ++i) scores.emplace_back(by_doc[i], i);
  std::stable_sort(scores.begin(), scores.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const size_t keep = r.top_n ? std::min<size_t>(scores.size(), static_cast<size_t>(*r.top_n)) : scores.size();
  json results = json::array();
  for (size_t k = 0; k < keep; ++k) {
    json item = {{"index", scores[k].second}, {"relevance_score", scores[k].first}};
    if (r.return_documents) item["document"] = {{"text", r.documents[scores[k].second]}};
    results.push_back(std::move(item));
  }
  HttpResponse res = json_response({{"id", "rerank-" + req.request_id},
                                    {"model", engine.served_model_name()},
                                    {"usage", {{"total_tokens", total_tokens}}},
                                    {"results", results}});
  res.log->prompt_tokens = total_tokens;
  return res;
}

}  // namespace loom::serve

namespace loom::serve {

HttpResponse handle_score(Engine& engine, const HttpRequest& req) {
  Parsed<RerankRequest> parsed = parse_score_request(req.body);
  if (!parsed.ok()) return error_response(parsed.error);
  const RerankRequest& r = *parsed.value;
  if (auto e = engine.check_model(r.model)) return error_response(*e);
  std::vector<double> scores;
  int64_t total_tokens = 0;
  if (auto e = score_documents(engine, req, r.query, r.documents, r.instruction.value_or(kDefaultInstruction), "text_2",
                               &scores, &total_tokens))
    return std::move(*e);
  json data = json::array();
  for (size_t i = 0; i < scores.size(); ++i) data.push_back({{"index", i}, {"object", "score"}, {"score", scores[i]}});
  HttpResponse res = json_response({{"id", "score-" + req.request_id},
                                    {"object", "list"},
                                    {"created", unix_now()},
                                    {"model", engine.served_model_name()},
                                    {"data", data},
                                    {"usage", {{"prompt_tokens", total_tokens}, {"total_tokens", total_tokens}}}});
  res.log->prompt_tokens = total_tokens;
  return res;
}

}  // namespace loom::serve
