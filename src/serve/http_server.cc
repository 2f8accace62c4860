// The one file that knows the HTTP library (cpp-httplib): it parses requests,
// keeps connections alive, frames chunked streams and enforces the body limit;
// this file routes, authenticates, maps lifecycle states to status codes,
// watches for clients that hang up, and logs a line per request.
#include "serve/http_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <random>

#include <httplib.h>

#include "serve/routes.h"
#include "serve/serving_common.h"

namespace loom::serve {

namespace {

using json = nlohmann::json;

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* digits = "0123456789abcdef";
  std::string s(n, '0');
  for (char& c : s) c = digits[rng() & 15];
  return s;
}

// (host, port) of a socket address, numerically.
bool endpoint(const sockaddr_storage& a, socklen_t len, std::string* host, int* port) {
  char h[NI_MAXHOST], p[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *host = h;
  *port = std::atoi(p);
  return true;
}

bool is_connection(int fd, const std::string& remote_addr, int remote_port, int local_port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  std::string host;
  int port = -1;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !endpoint(a, len, &host, &port)) return false;
  if (port != remote_port || host != remote_addr) return false;
  len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || !endpoint(a, len, &host, &port)) return false;
  return port == local_port;
}

// The library does not hand its socket to handlers, so the server finds the
// connection's descriptor by its endpoints to notice a client that hung up
// while its request is still being computed (no bytes are written then).
int find_connection_fd(const std::string& remote_addr, int remote_port, int local_port) {
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2) continue;
    struct stat st{};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    if (is_connection(fd, remote_addr, remote_port, local_port)) {
      found = fd;
      break;
    }
  }
  closedir(d);
  return found;
}

// False once the peer closed (or reset) the connection. Pipelined bytes waiting
// to be read mean it is still there.
bool peer_alive(int fd) {
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  const int r = poll(&p, 1, 0);
  if (r <= 0) return true;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
  }
  return true;
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
  if (engine.state() != EngineState::kLoading) r.body = engine.metrics().render(s ? *s : batching::ManagerStats{}, s.has_value());
  return r;
}

const Route kRoutes[] = {
    {"/v1/completions", "POST", true, handle_completions},
    {"/v1/chat/completions", "POST", true, handle_chat_completions},
    {"/v1/models", "GET", true, handle_models},
    {"/tokenize", "POST", true, handle_tokenize},
    {"/detokenize", "POST", true, handle_detokenize},
    {"/health", "GET", false, handle_health},
    {"/metrics", "GET", false, handle_metrics},
};

// The label of a path in loom:http_requests_total: only known routes, so that
// random paths cannot grow the metric without bound.
std::string known_route(const std::string& path) {
  for (const Route& r : kRoutes)
    if (path == r.path) return path;
  return "other";
}

class SinkAdapter : public EventSink {
 public:
  SinkAdapter(httplib::DataSink& sink, std::function<bool()> client) : sink_(sink), client_(std::move(client)) {}
  bool write(const std::string& data) override {
    if (broken_) return false;
    if (!sink_.write(data.data(), data.size())) broken_ = true;
    return !broken_;
  }
  bool connected() override { return !broken_ && sink_.is_writable() && client_(); }

 private:
  httplib::DataSink& sink_;
  std::function<bool()> client_;
  bool broken_ = false;
};

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

struct HttpServer::Impl {
  ServeOptions options;
  Engine* engine = nullptr;
  httplib::Server svr;
  int port = -1;

  void log_line(const HttpRequest& req, int status, const RequestLog& log) const {
    if (!options.log_requests) return;
    std::string line = "[serve] " + req.request_id + " " + req.method + " " + req.path + " " + std::to_string(status);
    if (log.prompt_tokens >= 0) line += " prompt_tokens=" + std::to_string(log.prompt_tokens);
    if (log.completion_tokens >= 0) line += " completion_tokens=" + std::to_string(log.completion_tokens);
    if (log.ttft_seconds >= 0) line += " ttft=" + format_seconds(log.ttft_seconds);
    line += " total=" + format_seconds(wall_now() - req.received_time);
    if (!log.outcome.empty()) line += " status=" + log.outcome;
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  void dispatch(const httplib::Request& hreq, httplib::Response& hres) {
    HttpRequest req;
    req.received_time = wall_now();
    req.method = hreq.method == "HEAD" ? "GET" : hreq.method;
    req.path = hreq.path;
    req.body = hreq.body;
    for (const auto& [k, v] : hreq.headers) {
      std::string key = k;
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[key] = v;
    }
    auto rid = req.headers.find("x-request-id");
    req.request_id = rid != req.headers.end() && !rid->second.empty() && rid->second.size() <= 128 ? rid->second : random_hex(24);
    const std::string remote_addr = hreq.remote_addr;
    const int remote_port = hreq.remote_port, local_port = hreq.local_port > 0 ? hreq.local_port : port;
    auto fd = std::make_shared<int>(-2);
    req.client_connected = [fd, remote_addr, remote_port, local_port] {
      if (*fd == -2) *fd = find_connection_fd(remote_addr, remote_port, local_port);
      if (*fd < 0) return true;  // not found: assume it is there (writes will tell)
      if (!is_connection(*fd, remote_addr, remote_port, local_port)) return false;  // closed, number reused
      return peer_alive(*fd);
    };

    HttpResponse res = route(req);
    if (engine->metrics_ready()) engine->metrics().record_http(known_route(req.path), res.status);
    hres.status = res.status;
    hres.set_header("X-Request-Id", req.request_id);
    for (const auto& [k, v] : res.headers) hres.set_header(k, v);
    if (!res.stream) {
      hres.set_content(res.body, res.content_type);
      log_line(req, res.status, *res.log);
      return;
    }
    hres.set_header("Cache-Control", "no-cache");
    hres.set_header("X-Accel-Buffering", "no");  // nginx passes events on as they come
    auto ran = std::make_shared<bool>(false);
    auto stream = res.stream;
    auto log = res.log;
    auto in_flight = std::make_shared<Engine::InFlight>(engine);
    auto client = req.client_connected;
    auto req_copy = std::make_shared<HttpRequest>(req);
    req_copy->body.clear();
    const int status = res.status;
    hres.set_chunked_content_provider(
        res.content_type,
        [this, ran, stream, log, client, req_copy, status](size_t, httplib::DataSink& sink) {
          *ran = true;
          SinkAdapter adapter(sink, client);
          stream(adapter);
          sink.done();
          log_line(*req_copy, status, *log);
          return true;
        },
        [this, ran, stream, log, req_copy, status, in_flight](bool) {
          if (!*ran) {
            GoneSink gone;
            stream(gone);
            log->outcome = "client disconnected";
            log_line(*req_copy, status, *log);
          }
        });
  }

  HttpResponse route(const HttpRequest& req) {
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
    if (!options.api_key.empty() && std::string(found->path) != "/health") {
      auto it = req.headers.find("authorization");
      if (it == req.headers.end() || it->second != "Bearer " + options.api_key) {
        ApiError e{401,
                   it == req.headers.end() ? "Missing API key: send \"Authorization: Bearer <key>\""
                                           : "Incorrect API key provided",
                   "invalid_request_error", "", "invalid_api_key"};
        HttpResponse r = error_response(e);
        r.headers.emplace_back("WWW-Authenticate", "Bearer");
        return r;
      }
    }
    if (found->needs_model && engine->state() != EngineState::kReady) {
      const bool loading = engine->state() == EngineState::kLoading;
      ApiError e{503, loading ? "the model is still loading" : "the server is shutting down", "service_unavailable", "",
                 loading ? "loading" : "shutting_down"};
      return error_response(e);
    }
    Engine::InFlight guard(engine);
    try {
      return found->handle(*engine, req);
    } catch (const std::exception& ex) {
      ApiError e{500, std::string("internal error: ") + ex.what(), "internal_error", "", ""};
      return error_response(e);
    }
  }
};

HttpServer::HttpServer(const ServeOptions& options, Engine* engine) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->engine = engine;
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  Impl& s = *impl_;
  const int threads = std::max(4, s.options.http_threads);
  s.svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.svr.set_payload_max_length(s.options.max_body_bytes);
  s.svr.set_keep_alive_max_count(10000);
  s.svr.set_keep_alive_timeout(30);
  s.svr.set_read_timeout(30);
  s.svr.set_write_timeout(30);
  s.svr.set_tcp_nodelay(true);
  auto handler = [this](const httplib::Request& req, httplib::Response& res) { impl_->dispatch(req, res); };
  s.svr.Get(".*", handler);
  s.svr.Post(".*", handler);
  s.svr.Put(".*", handler);
  s.svr.Patch(".*", handler);
  s.svr.Delete(".*", handler);
  s.svr.Options(".*", handler);
  // Errors the library answers itself (malformed request, body over the
  // limit, unknown method) get OpenAI's error object too.
  const size_t limit = s.options.max_body_bytes;
  s.svr.set_error_handler(httplib::Server::HandlerWithResponse([limit](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    ApiError e;
    e.status = res.status;
    switch (res.status) {
      case 413:
        e.message = "the request body is larger than the server's limit of " + std::to_string(limit) + " bytes";
        e.code = "request_too_large";
        break;
      case 414:
        e.message = "the request URI is too long";
        break;
      case 404:
      case 405:
        e.message = "Invalid URL (" + req.method + " " + req.path + ")";
        e.code = "not_found";
        break;
      default:
        e.message = "malformed HTTP request (status " + std::to_string(res.status) + ")";
        if (res.status >= 500) e.type = "internal_error";
    }
    res.set_content(e.to_json().dump(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    ApiError e{500, "internal error: " + what, "internal_error", "", ""};
    res.status = 500;
    res.set_content(e.to_json().dump(), "application/json");
  });
  if (s.options.port == 0) {
    s.port = s.svr.bind_to_any_port(s.options.host);
    if (s.port < 0) return io_error("serve: cannot listen on " + s.options.host + " (any port)");
  } else {
    if (!s.svr.bind_to_port(s.options.host, s.options.port))
      return io_error("serve: cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) +
                      " (in use, or not an address of this machine)");
    s.port = s.options.port;
  }
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

bool HttpServer::listen() { return impl_->svr.listen_after_bind(); }

void HttpServer::stop() {
  if (impl_->svr.is_running()) impl_->svr.stop();
}

}  // namespace loom::serve
