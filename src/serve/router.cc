#include "serve/router.h"

#include <chrono>
#include <cstdio>
#include <random>

#include "serve/json_parse.h"
#include "serve/protocol_messages.h"
#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

namespace {

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  for (char& c : s) c = digits[rng() & 15];
  return s;
}

struct Route {
  const char* path;
  const char* method;
  bool needs_model;  // 503 until the model is attached
  HttpResponse (*handle)(Engine&, const HttpRequest&);
};

HttpResponse handle_health(Engine& engine, const HttpRequest&) {
  switch (engine.state()) {
    case EngineState::kReady:
      return json_response({{"status", "ok"}});
    case EngineState::kLoading: {
      ApiError e{503, "the model is still loading", "service_unavailable", "", "loading"};
      return error_response(e);
    }
    case EngineState::kFailed: {
      ApiError e{503, engine.unavailable_reason(), "service_unavailable", "", "failed"};
      return error_response(e);
    }
    default: {
      ApiError e{503, "the server is shutting down", "service_unavailable", "", "shutting_down"};
      return error_response(e);
    }
  }
}

HttpResponse handle_metrics(Engine& engine, const HttpRequest&) {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  std::optional<batching::ManagerStats> s = engine.stats();
  const structured::ConstraintRegistry::Stats cs = engine.constraint_stats();
  if (engine.state() != EngineState::kLoading)
    r.body = engine.metrics().render(s ? *s : batching::ManagerStats{}, s.has_value(), cs);
  return r;
}

const Route kRoutes[] = {
    {"/v1/completions", "POST", true, handle_completions},
    {"/v1/chat/completions", "POST", true, handle_chat_completions},
    {"/v1/models", "GET", true, handle_models},
    {"/v1/messages", "POST", true, handle_messages},
    {"/v1/messages/count_tokens", "POST", true, handle_messages_count_tokens},
    {"/v1/responses", "POST", true, handle_responses},
    {"/v1/rerank", "POST", true, handle_rerank},
    {"/v2/rerank", "POST", true, handle_rerank},
    {"/rerank", "POST", true, handle_rerank},
    {"/score", "POST", true, handle_score},
    {"/v1/score", "POST", true, handle_score},
    {"/tokenize", "POST", true, handle_tokenize},
    {"/detokenize", "POST", true, handle_detokenize},
    {"/health", "GET", false, handle_health},
    {"/", "GET", false, handle_chat_page},
    {"/metrics", "GET", false, handle_metrics},
};

// The label of a path in loom:http_requests_total: only known routes, so that
// random paths cannot grow the metric without bound.
std::string known_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return path;
  return "other";
}

// A stream whose client left before it started: it cancels its job at once.
class GoneSink : public EventSink {
 public:
  bool write(const std::string&) override { return false; }
  bool connected() override { return false; }
};

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3fs", s);
  return buf;
}

}  // namespace

void abandon_stream(HttpResponse& res) {
  GoneSink gone;
  res.stream(gone);
  res.log->outcome = "client disconnected";
}

// An X-Request-Id goes back into a response header, the response id and the
// log: only printable ASCII is taken as it is.
bool usable_request_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id)
    if (c < 0x20 || c > 0x7e) return false;
  return true;
}

// Control bytes (and bytes beyond ASCII) of client text in the log, as \xNN:
// they would otherwise drive the terminal that shows it.
std::string escape_for_log(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

// Equal strings, in a time that depends on the length of `given` only, not on
// where it first differs from the key.
bool same_key(const std::string& given, const std::string& key) {
  unsigned char diff = given.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ (key.empty() ? 0 : key[i % key.size()]));
  return diff == 0;
}

// "Authorization: <scheme> <token>" with the scheme Bearer in any case.
bool authorized(const std::string& header, const std::string& key) {
  size_t i = 0;
  while (i < header.size() && header[i] == ' ') ++i;
  const size_t scheme_end = header.find(' ', i);
  if (scheme_end == std::string::npos) return false;
  std::string scheme = header.substr(i, scheme_end - i);
  for (char& c : scheme) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t t = scheme_end;
  while (t < header.size() && header[t] == ' ') ++t;
  size_t e = header.size();
  while (e > t && header[e - 1] == ' ') --e;
  const bool key_ok = same_key(header.substr(t, e - t), key);
  return scheme == "bearer" && key_ok;
}

void Router::prepare(HttpRequest& req) const {
  req.received_time = wall_seconds();
  auto rid = req.headers.find("x-request-id");
  req.request_id = rid != req.headers.end() && usable_request_id(rid->second) ? rid->second : random_hex(24);
}

// Anthropic's clients read errors in Anthropic's shape: every error of its paths
// (auth, 404/405, 503, the route's own) is rewritten once here.
static bool anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

static void to_anthropic_error(HttpResponse& res) {
  if (res.status < 400 || res.stream) return;
  std::optional<nlohmann::ordered_json> body = parse_json(res.body);
  if (!body || !body->is_object() || !body->contains("error") || !(*body)["error"].is_object()) return;
  const nlohmann::ordered_json& e = (*body)["error"];
  ApiError err;
  err.status = res.status;
  err.message = e.value("message", "");
  res.body = anthropic_error_json(err).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

HttpResponse Router::handle(const HttpRequest& req) {
  HttpResponse res = route(req);
  if (anthropic_path(req.path)) to_anthropic_error(res);
  if (engine_->metrics_ready()) engine_->metrics().record_http(known_route(req.path), res.status);
  return res;
}

void Router::log(const HttpRequest& req, int status, const RequestLog& log) const {
  if (!options_.log_requests) return;
  std::string line = "[serve] " + req.request_id + " " + req.method + " " + req.path + " " + std::to_string(status);
  if (log.prompt_tokens >= 0) line += " prompt_tokens=" + std::to_string(log.prompt_tokens);
  if (log.completion_tokens >= 0) line += " completion_tokens=" + std::to_string(log.completion_tokens);
  if (log.ttft_seconds >= 0) line += " ttft=" + format_seconds(log.ttft_seconds);
  line += " total=" + format_seconds(wall_seconds() - req.received_time);
  if (!log.outcome.empty()) line += " status=" + log.outcome;
  std::fprintf(stderr, "%s\n", escape_for_log(line).c_str());
}

HttpResponse Router::route(const HttpRequest& req) {
  // Authentication comes first: without the key, a client learns nothing,
  // not even which paths and methods exist.
  // The chat page holds no data (a browser cannot send a key to open it); every call
  // it makes carries the key.
  if (!options_.api_key.empty() && req.path != "/health" && !(req.path == "/" && req.method == "GET")) {
    // Bearer (OpenAI's clients) or x-api-key (Anthropic's).
    auto it = req.headers.find("authorization");
    auto x_key = req.headers.find("x-api-key");
    const bool bearer_ok = it != req.headers.end() && authorized(it->second, options_.api_key);
    const bool x_key_ok = x_key != req.headers.end() && same_key(x_key->second, options_.api_key);
    if (!bearer_ok && !x_key_ok) {
      const bool missing = it == req.headers.end() && x_key == req.headers.end();
      ApiError e{401,
                 missing ? "Missing API key: send \"Authorization: Bearer <key>\" or \"x-api-key: <key>\""
                         : "Incorrect API key provided",
                 "invalid_request_error", "", "invalid_api_key"};
      HttpResponse r = error_response(e);
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return r;
    }
  }
  const Route* found = nullptr;
  std::string allowed;
  for (const Route& r : kRoutes) {
    if (req.path != r.path) continue;
    allowed += (allowed.empty() ? "" : ", ") + std::string(r.method);
    if (req.method == r.method) found = &r;
  }
  if (allowed.empty()) {
    ApiError e{404, "Invalid URL (" + req.method + " " + req.path + ")", "invalid_request_error", "", "not_found"};
    return error_response(e);
  }
  if (!found) {
    ApiError e{405, "Method " + req.method + " is not allowed on " + req.path + " (allowed: " + allowed + ")",
               "invalid_request_error", "", "method_not_allowed"};
    HttpResponse r = error_response(e);
    r.headers.emplace_back("Allow", allowed);
    return r;
  }
  if (found->needs_model && engine_->state() != EngineState::kReady) {
    const bool loading = engine_->state() == EngineState::kLoading;
    const bool failed = engine_->state() == EngineState::kFailed;
    ApiError e{503, engine_->unavailable_reason(), "service_unavailable", "",
               loading ? "loading" : failed ? "failed" : "shutting_down"};
    return error_response(e);
  }
  Engine::InFlight guard(engine_);
  try {
    return found->handle(*engine_, req);
  } catch (const std::exception& ex) {
    ApiError e{500, std::string("internal error: ") + ex.what(), "internal_error", "", ""};
    return error_response(e);
  }
}

}  // namespace loom::serve
