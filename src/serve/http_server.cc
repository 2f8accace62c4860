// The HTTP adapter over cpp-httplib, the one file that knows the library: it
// parses requests, keeps connections alive, frames chunked streams and enforces
// the body limit; the Router does the rest.
#include "serve/http_server.h"

#include <sys/socket.h>

#include <cctype>

#include <httplib.h>

#include "serve/connection_probe.h"
#include "serve/router.h"

namespace loom::serve {

namespace {

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

}  // namespace

// The library listens with a backlog of 5: a burst of new connections (32 clients
// at once) overflows it and the kernel drops SYNs, which clients retry after a
// second. The listening socket is reachable from a subclass only.
class ListeningServer : public httplib::Server {
 public:
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }  // a second listen() updates the backlog
};

struct HttpServer::Impl {
  ServeOptions options;
  Engine* engine = nullptr;
  std::unique_ptr<Router> router;
  ListeningServer svr;
  int port = -1;

  void dispatch(const httplib::Request& hreq, httplib::Response& hres) {
    HttpRequest req;
    req.method = hreq.method == "HEAD" ? "GET" : hreq.method;
    req.path = hreq.path;
    req.body = hreq.body;
    for (const auto& [k, v] : hreq.headers) {
      std::string key = k;
      for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers[key] = v;
    }
    router->prepare(req);
    // The library does not hand its socket to handlers: find it by its endpoints.
    const std::string remote_addr = hreq.remote_addr;
    const int remote_port = hreq.remote_port, local_port = hreq.local_port > 0 ? hreq.local_port : port;
    auto fd = std::make_shared<int>(-2);
    req.client_connected = [fd, remote_addr, remote_port, local_port] {
      if (*fd == -2) *fd = find_connection_fd(remote_addr, remote_port, local_port);
      if (*fd < 0) return true;  // not found: assume it is there (writes will tell)
      if (!is_connection(*fd, remote_addr, remote_port, local_port)) return false;  // closed, number reused
      return peer_alive(*fd);
    };

    HttpResponse res = router->handle(req);
    hres.status = res.status;
    hres.set_header("X-Request-Id", req.request_id);
    for (const auto& [k, v] : res.headers) hres.set_header(k, v);
    if (!res.stream) {
      hres.set_content(res.body, res.content_type);
      router->log(req, res.status, *res.log);
      return;
    }
    hres.set_header("Cache-Control", "no-cache");
    hres.set_header("X-Accel-Buffering", "no");  // nginx passes events on as they come
    auto ran = std::make_shared<bool>(false);
    auto shared = std::make_shared<HttpResponse>(std::move(res));
    auto in_flight = std::make_shared<Engine::InFlight>(engine);
    auto client = req.client_connected;
    req.body.clear();
    auto logged = std::make_shared<HttpRequest>(std::move(req));
    hres.set_chunked_content_provider(
        shared->content_type,
        [this, ran, shared, client, logged](size_t, httplib::DataSink& sink) {
          *ran = true;
          SinkAdapter adapter(sink, client);
          shared->stream(adapter);
          sink.done();
          router->log(*logged, shared->status, *shared->log);
          return true;
        },
        [this, ran, shared, logged, in_flight](bool) {
          if (*ran) return;
          abandon_stream(*shared);
          router->log(*logged, shared->status, *shared->log);
        });
  }
};

HttpServer::HttpServer(const ServeOptions& options, Engine* engine) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->engine = engine;
  impl_->router = std::make_unique<Router>(options, engine);
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
  s.svr.widen_backlog();
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

bool HttpServer::listen() { return impl_->svr.listen_after_bind(); }

void HttpServer::stop() {
  if (impl_->svr.is_running()) impl_->svr.stop();
}

}  // namespace loom::serve
