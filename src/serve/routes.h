// The routes, one family a file (serving_completion.cc, serving_chat.cc,
// serving_tokenization.cc): each turns a parsed request into engine calls and
// the outputs back into OpenAI's (or vLLM's) response shapes.
#pragma once

#include "serve/engine.h"
#include "serve/http.h"

namespace loom::serve {

HttpResponse handle_completions(Engine& engine, const HttpRequest& req);
HttpResponse handle_chat_completions(Engine& engine, const HttpRequest& req);
HttpResponse handle_tokenize(Engine& engine, const HttpRequest& req);
HttpResponse handle_detokenize(Engine& engine, const HttpRequest& req);
HttpResponse handle_models(Engine& engine, const HttpRequest& req);
HttpResponse handle_messages(Engine& engine, const HttpRequest& req);               // serving_messages.cc
HttpResponse handle_messages_count_tokens(Engine& engine, const HttpRequest& req);  // serving_messages.cc
HttpResponse handle_responses(Engine& engine, const HttpRequest& req);              // serving_responses.cc
HttpResponse handle_rerank(Engine& engine, const HttpRequest& req);                 // serving_rerank.cc
HttpResponse handle_score(Engine& engine, const HttpRequest& req);                  // serving_rerank.cc
HttpResponse handle_chat_page(Engine& engine, const HttpRequest& req);              // chat_page.cc

}  // namespace loom::serve
