// The HTTP adapter over Boost.Beast (built with -DLOOM_HTTP_LIBRARY=beast), kept to
// measure against cpp-httplib on the same load (docs/serve.md says which won and
// why). Beast parses requests and frames chunked streams; this file owns the
// sockets: a bounded pool of threads, each serving one connection's keep-alive loop.
#ifdef LOOM_HTTP_BEAST

#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cctype>
#include <mutex>
#include <set>
#include <utility>  // before Boost: 1.74's asio uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "serve/connection_probe.h"
#include "serve/http_server.h"
#include "serve/router.h"

namespace loom::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

namespace {

class ChunkSink : public EventSink {
 public:
  explicit ChunkSink(tcp::socket& s) : socket_(s) {}
  bool write(const std::string& data) override {
    if (broken_) return false;
    beast::error_code ec;
    net::write(socket_, http::make_chunk(net::buffer(data)), ec);
    if (ec) broken_ = true;
    return !broken_;
  }
  bool connected() override { return !broken_ && peer_alive(socket_.native_handle()); }

 private:
  tcp::socket& socket_;
  bool broken_ = false;
};

void set_timeouts(tcp::socket& s, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(s.native_handle(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const int one = 1;
  setsockopt(s.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

struct HttpServer::Impl {
  ServeOptions options;
  Engine* engine = nullptr;
  std::unique_ptr<Router> router;
  net::io_context io;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<net::thread_pool> pool;
  std::atomic<bool> stopping{false};
  std::mutex sockets_mu;
  std::set<tcp::socket*> sockets;  // open connections, shut down by stop()
  int port = -1;

  void reply_error(tcp::socket& s, int status, const std::string& message) {
    ApiError e;
    e.status = status;
    e.message = message;
    http::response<http::string_body> res{static_cast<http::status>(status), 11};
    res.set(http::field::content_type, "application/json");
    res.body() = e.to_json().dump();
    res.keep_alive(false);
    res.prepare_payload();
    beast::error_code ec;
    http::write(s, res, ec);
  }

  void serve_connection(tcp::socket socket) {
    {
      std::lock_guard<std::mutex> lk(sockets_mu);
      sockets.insert(&socket);
    }
    set_timeouts(socket, 30);
    beast::flat_buffer buffer;
    while (!stopping) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      parser.header_limit(64 * 1024);
      beast::error_code ec;
      http::read(socket, buffer, parser, ec);
      if (ec == http::error::end_of_stream || ec == net::error::eof || ec == net::error::connection_reset) break;
      if (ec == http::error::body_limit) {
        reply_error(socket, 413, "the request body is larger than the server's limit of " +
                                     std::to_string(options.max_body_bytes) + " bytes");
        break;
      }
      if (ec) {
        if (ec != net::error::would_block && ec != net::error::timed_out)
          reply_error(socket, 400, "malformed HTTP request (" + ec.message() + ")");
        break;
      }
      const http::request<http::string_body>& hreq = parser.get();
      HttpRequest req;
      req.method = std::string(hreq.method_string());
      if (req.method == "HEAD") req.method = "GET";
      const std::string target(hreq.target());
      req.path = target.substr(0, target.find('?'));
      req.body = hreq.body();
      for (const auto& f : hreq) {
        std::string key(f.name_string());
        for (char& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        req.headers[key] = std::string(f.value());
      }
      router->prepare(req);
      const int fd = socket.native_handle();
      req.client_connected = [fd] { return peer_alive(fd); };
      const bool keep_alive = hreq.keep_alive();
      HttpResponse res = router->handle(req);
      if (!res.stream) {
        http::response<http::string_body> out{static_cast<http::status>(res.status), hreq.version()};
        out.set(http::field::content_type, res.content_type);
        out.set("X-Request-Id", req.request_id);
        for (const auto& [k, v] : res.headers) out.set(k, v);
        out.body() = std::move(res.body);
        out.keep_alive(keep_alive);
        out.prepare_payload();
        if (hreq.method() == http::verb::head) out.body().clear();
        http::write(socket, out, ec);
        router->log(req, res.status, *res.log);
        if (ec || !keep_alive) break;
        continue;
      }
      Engine::InFlight in_flight(engine);
      http::response<http::empty_body> head{static_cast<http::status>(res.status), hreq.version()};
      head.set(http::field::content_type, res.content_type);
      head.set(http::field::cache_control, "no-cache");
      head.set("X-Accel-Buffering", "no");
      head.set("X-Request-Id", req.request_id);
      for (const auto& [k, v] : res.headers) head.set(k, v);
      head.keep_alive(keep_alive);
      head.chunked(true);
      http::response_serializer<http::empty_body> sr{head};
      http::write_header(socket, sr, ec);
      if (ec) {
        abandon_stream(res);
        router->log(req, res.status, *res.log);
        break;
      }
      ChunkSink sink(socket);
      res.stream(sink);
      net::write(socket, http::make_chunk_last(), ec);
      router->log(req, res.status, *res.log);
      if (ec || !keep_alive) break;
    }
    beast::error_code ignored;
    socket.shutdown(tcp::socket::shutdown_send, ignored);
    std::lock_guard<std::mutex> lk(sockets_mu);
    sockets.erase(&socket);
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
  try {
    const tcp::endpoint ep(net::ip::make_address(s.options.host), static_cast<unsigned short>(s.options.port));
    s.acceptor = std::make_unique<tcp::acceptor>(s.io);
    s.acceptor->open(ep.protocol());
    s.acceptor->set_option(net::socket_base::reuse_address(true));
    s.acceptor->bind(ep);
    s.acceptor->listen(net::socket_base::max_listen_connections);
    s.port = s.acceptor->local_endpoint().port();
  } catch (const std::exception& e) {
    return io_error("serve: cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) + " (" + e.what() + ")");
  }
  s.pool = std::make_unique<net::thread_pool>(static_cast<size_t>(std::max(4, s.options.http_threads)));
  return Status::Ok();
}

int HttpServer::port() const { return impl_->port; }

bool HttpServer::listen() {
  Impl& s = *impl_;
  while (!s.stopping) {
    beast::error_code ec;
    tcp::socket socket(s.io);
    s.acceptor->accept(socket, ec);
    if (ec) {
      if (s.stopping) break;
      continue;
    }
    net::post(*s.pool, [&s, sock = std::move(socket)]() mutable { s.serve_connection(std::move(sock)); });
  }
  s.pool->join();
  return true;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopping.exchange(true)) return;
  beast::error_code ec;
  if (s.acceptor) {
    ::shutdown(s.acceptor->native_handle(), SHUT_RDWR);  // wakes the blocking accept
    s.acceptor->close(ec);
  }
  std::lock_guard<std::mutex> lk(s.sockets_mu);
  for (tcp::socket* sock : s.sockets) sock->shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace loom::serve

#endif  // LOOM_HTTP_BEAST
