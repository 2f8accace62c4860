// The HTTP/1.1 server of `loom serve`, the one file that knows the HTTP library
// (Boost.Beast's request parser over Boost.Asio). One event thread owns every
// socket: it accepts, reads request heads and bodies under deadlines and limits,
// and writes responses, so a connection that is idle, slow or stalled costs
// memory and a timer, never a thread. A complete request goes to a pool of
// `http_threads` workers, which run the Router (and a stream's whole life); the
// quick read-only routes (health, metrics, models) have two workers of their
// own, so that a load balancer's probe is answered while every generation worker
// is busy. Workers hand their writes back to the event thread. Each connection
// handles one request at a time, so pipelined requests are answered in order.
#include "serve/http_server.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <list>
#include <mutex>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "loom/core/logging.h"
#include "serve/router.h"

namespace loom::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace beast_adapter {

std::string lower(beast::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string trim(beast::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

Clock::duration seconds(double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); }

// A request refused before it reached the Router: its status and message.
struct Refusal {
  int status = 400;
  std::string message, code;
};

// Beast's parser with our own storage: header fields counted and kept with
// lower-case names, the body (decoded from chunks) in a string under the
// parser's body limit, and content codings refused before any body byte.
class RequestParser : public http::basic_parser<true> {
 public:
  RequestParser(const ServeOptions& o) : max_headers_(o.max_headers) {
    header_limit(static_cast<std::uint32_t>(o.max_header_bytes));
    body_limit(static_cast<std::uint64_t>(o.max_body_bytes));
  }

  std::string method, target;
  int version = 11;
  bool saw_request_line = false;
  std::map<std::string, std::string> headers;
  std::string body;
  std::optional<Refusal> refusal;  // set with an error: why, in HTTP terms

 private:
  void refuse(int status, std::string message, std::string code, beast::error_code& ec) {
    refusal = Refusal{status, std::move(message), std::move(code)};
    ec = http::error::bad_value;
  }
  void on_request_impl(http::verb, beast::string_view method_str, beast::string_view t, int v, beast::error_code& ec) override {
    saw_request_line = true;
    method = std::string(method_str);
    target = std::string(t);
    version = v;
    if (v / 10 != 1) refuse(505, "HTTP version not supported (HTTP/1.0 and HTTP/1.1 are)", "", ec);
  }
  void on_response_impl(int, beast::string_view, int, beast::error_code& ec) override { ec = http::error::bad_version; }
  void on_field_impl(http::field, beast::string_view name, beast::string_view value, beast::error_code& ec) override {
    if (++fields_ > max_headers_) {
      refuse(431, "more than " + std::to_string(max_headers_) + " header fields", "headers_too_many", ec);
      return;
    }
    std::string& slot = headers[lower(name)];
    slot += slot.empty() ? std::string(value) : ", " + std::string(value);
  }
  void on_header_impl(beast::error_code& ec) override {
    if (auto it = headers.find("content-encoding"); it != headers.end() && lower(trim(it->second)) != "identity")
      return refuse(415, "compressed request bodies (Content-Encoding: " + it->second + ") are not accepted; send it uncompressed",
                    "unsupported_content_encoding", ec);
    if (auto it = headers.find("transfer-encoding"); it != headers.end() && lower(trim(it->second)) != "chunked")
      return refuse(501, "Transfer-Encoding " + it->second + " is not supported (only chunked)", "", ec);
  }
  void on_body_init_impl(const boost::optional<std::uint64_t>& length, beast::error_code&) override {
    if (length) body.reserve(static_cast<size_t>(*length));  // under the body limit: the parser checked it
  }
  std::size_t on_body_impl(beast::string_view data, beast::error_code&) override {
    body.append(data.data(), data.size());
    return data.size();
  }
  void on_chunk_header_impl(std::uint64_t, beast::string_view extensions, beast::error_code& ec) override {
    if (extensions.size() > 1024) refuse(400, "chunk extensions longer than 1024 bytes", "", ec);
  }
  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view data, beast::error_code&) override {
    body.append(data.data(), data.size());
    return data.size();
  }
  void on_finish_impl(beast::error_code&) override {}

  int max_headers_;
  int fields_ = 0;
};

// What a parse error means for the client.
Refusal refusal_for(const RequestParser& p, beast::error_code ec, const ServeOptions& o) {
  if (p.refusal) return *p.refusal;
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
    if (!p.saw_request_line) return {414, "the request line is longer than " + std::to_string(o.max_header_bytes) + " bytes", ""};
    return {431, "the request header is larger than " + std::to_string(o.max_header_bytes) + " bytes", "headers_too_large"};
  }
  if (ec == http::error::body_limit)
    return {413, "the request body is larger than the server's limit of " + std::to_string(o.max_body_bytes) + " bytes",
            "request_too_large"};
  if (ec == http::error::bad_content_length) return {400, "invalid Content-Length", ""};
  return {400, "malformed HTTP request: " + ec.message(), ""};
}

std::string status_line(int version, int status) {
  std::string reason(http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status))));
  if (reason.empty() || reason == "<unknown-status>") reason = "Status";
  return (version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(status) + " " + reason + "\r\n";
}

std::string error_body(const Refusal& r) {
  ApiError e;
  e.status = r.status;
  e.message = r.message;
  e.code = r.code;
  if (r.status >= 500 && r.status != 501 && r.status != 505) e.type = "internal_error";
  return e.to_json().dump();
}

// Waits for a write the event thread does on a worker's behalf.
struct WriteWait {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<bool> ok;
  void set(bool v) {
    std::lock_guard<std::mutex> lk(mu);
    ok = v;
    cv.notify_all();
  }
  bool wait(Clock::duration limit) {
    std::unique_lock<std::mutex> lk(mu);
    cv.wait_for(lk, limit, [&] { return ok.has_value(); });
    return ok.value_or(false);
  }
};

class WorkerPool {
 public:
  explicit WorkerPool(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkerPool() { join(); }
  void post(std::function<void()> f) {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(f));
    cv_.notify_one();
  }
  // Runs what is queued, then ends the threads.
  void join() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stopping_ = true;
      cv_.notify_all();
    }
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

class Connection;

}  // namespace beast_adapter

using beast_adapter::Connection;
using namespace beast_adapter;

struct HttpServer::Impl {
  ServeOptions options;
  Engine* engine = nullptr;
  std::unique_ptr<Router> router;
  net::io_context io{1};
  tcp::acceptor acceptor{io};
  net::steady_timer accept_retry{io};
  std::unique_ptr<WorkerPool> workers;
  std::unique_ptr<WorkerPool> probe_workers;  // GET /health, /metrics, /v1/models
  int port = -1;
  size_t max_connections = 0;
  // Event thread only.
  std::list<Connection*> connections;
  bool draining = false;
  std::atomic<bool> stopped{false}, running{false};

  void accept();
  void relieve_pressure();
};

namespace beast_adapter {

// One client connection; lives on the event thread except for `handle` and the
// stream's writes, which a worker runs while the connection waits (kHandling).
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { kIdle, kReading, kHandling, kClosing, kClosed };

  Connection(HttpServer::Impl& s, tcp::socket socket)
      : s_(s), socket_(std::move(socket)), timer_(s.io), buffer_(s.options.max_header_bytes + (64u << 10)) {}

  void start() {
    s_.connections.push_front(this);
    self_in_list_ = s_.connections.begin();
    await_request();
  }

  Phase phase() const { return phase_; }
  Clock::time_point since() const { return since_; }

  // Ends the connection at once (event thread).
  void close() {
    if (phase_ == Phase::kClosed) return;
    phase_ = Phase::kClosed;
    closed_ = true;
    s_.connections.erase(self_in_list_);
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.cancel(ignored);
    timer_.cancel();
    // The descriptor itself closes with the object, after the worker is done
    // with it: a worker polling a closed, reused descriptor would see another client.
  }

  // The server is draining: an idle keep-alive connection ends now. One that
  // has not finished its first request may be a load balancer's health check
  // on its way (it gets a 503): it has a second at most.
  void drain() {
    if (phase_ == Phase::kClosing || (phase_ == Phase::kIdle && served_)) return close();
    if ((phase_ == Phase::kIdle || phase_ == Phase::kReading) && timer_.expiry() > Clock::now() + std::chrono::seconds(1))
      set_deadline(Clock::now() + std::chrono::seconds(1));
  }

 private:
  void set_deadline(Clock::time_point at) {
    timer_.expires_at(at);
    timer_.async_wait([self = shared_from_this(), at](beast::error_code ec) {
      if (ec || self->phase_ == Phase::kClosed || self->timer_.expiry() != at) return;
      self->on_deadline();
    });
  }

  void on_deadline() {
    if (phase_ == Phase::kIdle) {
      close();  // idle keep-alive: nothing to tell
    } else if (phase_ == Phase::kReading) {
      // A head or body that did not arrive in time: 408, then close.
      socket_.cancel();
      char limit[32];
      std::snprintf(limit, sizeof limit, "%g", s_.options.request_timeout);
      reply_error({408, std::string("the request did not arrive within --request-timeout (") + limit + " s)", ""});
    } else {
      close();  // a write the client did not accept in time, or a lingering close
    }
  }

  void await_request() {
    parser_.emplace(s_.options);
    if (buffer_.size() > 0) return read_head();  // a pipelined request
    phase_ = Phase::kIdle;
    since_ = Clock::now();
    buffer_.shrink_to_fit();
    const double idle = s_.draining ? std::min(1.0, s_.options.request_timeout) : s_.options.keep_alive_timeout;
    set_deadline(Clock::now() + seconds(idle));
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (self->phase_ != Phase::kIdle) return;
      if (ec) return self->close();
      self->read_head();
    });
  }

  void read_head() {
    phase_ = Phase::kReading;
    since_ = Clock::now();
    set_deadline(Clock::now() + seconds(s_.options.request_timeout));
    http::async_read_header(socket_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->phase_ != Phase::kReading) return;  // closed, or answered 408
      if (ec) return self->on_read_error(ec);
      self->on_head();
    });
  }

  void on_head() {
    RequestParser& p = *parser_;
    if (p.is_done()) return dispatch();
    auto expect = p.headers.find("expect");
    if (p.version == 11 && expect != p.headers.end() && lower(trim(expect->second)) == "100-continue") {
      auto data = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      net::async_write(socket_, net::buffer(*data), [self = shared_from_this(), data](beast::error_code ec, size_t) {
        if (self->phase_ != Phase::kReading) return;
        if (ec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(socket_, buffer_, *parser_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (self->phase_ != Phase::kReading) return;  // closed, or answered 408
      if (ec) return self->on_read_error(ec);
      self->dispatch();
    });
  }

  void on_read_error(beast::error_code ec) {
    // The client left (between requests, or part-way: nobody to answer).
    if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted)
      return close();
    reply_error(refusal_for(*parser_, ec, s_.options));
  }

  // A request refused before the Router: the reply, then a lingering close
  // (what follows in the stream cannot be trusted to be a request).
  void reply_error(const Refusal& r) {
    if (phase_ == Phase::kClosed) return;
    std::string body = error_body(r);
    std::string head = status_line(parser_ && parser_->version == 10 ? 10 : 11, r.status) +
                       "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
                       "\r\nConnection: close\r\n\r\n";
    if (s_.engine->metrics_ready()) s_.engine->metrics().record_http("other", r.status);
    keep_alive_ = false;
    write_then_continue(std::make_shared<std::string>(head + body));
  }

  void dispatch() {
    RequestParser& p = *parser_;
    phase_ = Phase::kHandling;
    timer_.cancel();
    version_ = p.version;
    head_ = p.method == "HEAD";
    auto connection = p.headers.find("connection");
    const std::string conn_value = connection == p.headers.end() ? "" : lower(connection->second);
    keep_alive_ = version_ == 11 ? conn_value.find("close") == std::string::npos : conn_value.find("keep-alive") != std::string::npos;
    auto req = std::make_shared<HttpRequest>();
    req->method = head_ ? "GET" : p.method;
    req->path = p.target.substr(0, p.target.find('?'));
    req->headers = std::move(p.headers);
    req->body = std::move(p.body);
    parser_.reset();
    s_.router->prepare(*req);  // the request id, and its arrival time for the latency metrics
    std::weak_ptr<Connection> weak = weak_from_this();
    req->client_connected = [weak] {
      auto c = weak.lock();
      return c && c->client_present(/*in_stream=*/false) != Presence::kGone;
    };
    const bool probe = req->method == "GET" && (req->path == "/health" || req->path == "/metrics" || req->path == "/v1/models");
    (probe ? s_.probe_workers : s_.workers)->post([self = shared_from_this(), req] {
      try {
        self->handle(*req);
      } catch (const std::exception& e) {  // a worker thread must not end the process
        log_error(std::string("serve: request failed in the HTTP layer: ") + e.what());
        self->abort_from_worker();
      }
    });
  }

 public:
  enum class Presence { kHere, kHalfClosed, kGone };

  // From the worker while it handles a request (the event thread does not
  // touch the socket then). A client that shut down its write side may still
  // read the reply, or may have closed the socket: one interim write tells
  // (a closed socket answers it with a reset, seen on the next poll).
  Presence client_present(bool in_stream) {
    if (closed_) return Presence::kGone;
    pollfd p{socket_.native_handle(), static_cast<short>(POLLIN | POLLRDHUP), 0};
    if (::poll(&p, 1, 0) <= 0) return Presence::kHere;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return Presence::kGone;
    if (!(p.revents & POLLRDHUP)) return Presence::kHere;
    if (!probed_ && !in_stream && version_ == 11) {
      probed_ = true;
      static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
      if (::send(socket_.native_handle(), kContinue, sizeof kContinue - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return Presence::kGone;
    }
    return Presence::kHalfClosed;
  }

  // Writes on the event thread and waits for it (a stream's events); false
  // when the client is gone or did not take the bytes within --write-timeout.
  bool write_and_wait(std::string data) {
    if (closed_) return false;
    auto wait = std::make_shared<WriteWait>();
    auto bytes = std::make_shared<std::string>(std::move(data));
    net::post(s_.io, [self = shared_from_this(), wait, bytes] {
      if (self->phase_ == Phase::kClosed) return wait->set(false);
      self->set_deadline(Clock::now() + seconds(self->s_.options.write_timeout));
      net::async_write(self->socket_, net::buffer(*bytes), [self, wait, bytes](beast::error_code ec, size_t) {
        if (self->phase_ != Phase::kClosed) {
          self->timer_.cancel();
          if (ec) self->close();
        }
        wait->set(!ec);
      });
    });
    return wait->wait(seconds(s_.options.write_timeout + 5));
  }

  // Writes the rest of a response, then reads the next request (or closes).
  void finish(std::string data) {
    net::post(s_.io, [self = shared_from_this(), bytes = std::make_shared<std::string>(std::move(data))] {
      if (self->phase_ == Phase::kClosed) return;
      self->write_then_continue(bytes);
    });
  }

  void abort_from_worker() {
    net::post(s_.io, [self = shared_from_this()] { self->close(); });
  }

  int version() const { return version_; }
  bool keep_alive() const { return keep_alive_; }

 private:
  void handle(HttpRequest& req);

  void write_then_continue(std::shared_ptr<std::string> bytes) {
    phase_ = Phase::kHandling;
    served_ = true;
    set_deadline(Clock::now() + seconds(s_.options.write_timeout));
    net::async_write(socket_, net::buffer(*bytes), [self = shared_from_this(), bytes](beast::error_code ec, size_t) {
      if (self->phase_ == Phase::kClosed) return;
      self->timer_.cancel();
      if (ec) return self->close();
      if (!self->keep_alive_ || self->s_.draining) return self->linger();
      self->await_request();
    });
  }

  // Closing after a reply: stop sending, then read and drop what the client
  // still sends, so that closing with unread bytes does not reset the
  // connection before the client read the reply.
  void linger() {
    phase_ = Phase::kClosing;
    since_ = Clock::now();
    beast::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    set_deadline(Clock::now() + std::chrono::seconds(2));
    discard();
  }

  void discard() {
    if (lingered_ > (1u << 20)) return close();
    buffer_.consume(buffer_.size());
    socket_.async_read_some(buffer_.prepare(16 << 10), [self = shared_from_this()](beast::error_code ec, size_t n) {
      if (self->phase_ == Phase::kClosed) return;
      if (ec) return self->close();
      self->lingered_ += n;
      self->buffer_.commit(n);
      self->discard();
    });
  }

  HttpServer::Impl& s_;
  tcp::socket socket_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<RequestParser> parser_;
  std::list<Connection*>::iterator self_in_list_;
  Phase phase_ = Phase::kIdle;
  Clock::time_point since_ = Clock::now();
  std::atomic<bool> closed_{false};
  bool served_ = false;  // a reply was written: an idle connection is then a keep-alive one
  bool keep_alive_ = true, head_ = false, probed_ = false;
  int version_ = 11;
  size_t lingered_ = 0;
};

std::string response_head(const Connection& c, const HttpResponse& res, const std::string& request_id, bool streaming) {
  std::string head = status_line(c.version(), res.status);
  head += "Content-Type: " + res.content_type + "\r\n";
  head += "X-Request-Id: " + request_id + "\r\n";
  for (const auto& [k, v] : res.headers) head += k + ": " + v + "\r\n";
  if (streaming) {
    head += "Cache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";  // nginx passes events on as they come
    // HTTP/1.0 has no chunks: the stream ends when the connection closes.
    head += c.version() == 11 ? "Transfer-Encoding: chunked\r\n" : "";
  } else {
    head += "Content-Length: " + std::to_string(res.body.size()) + "\r\n";
  }
  const bool keep = c.keep_alive() && !(streaming && c.version() == 10);
  if (c.version() == 11 && !keep) head += "Connection: close\r\n";
  if (c.version() == 10 && keep) head += "Connection: keep-alive\r\n";
  return head + "\r\n";
}

class StreamSink : public EventSink {
 public:
  StreamSink(Connection& c) : c_(c), chunked_(c.version() == 11) {}
  bool write(const std::string& data) override {
    if (broken_) return false;
    if (data.empty()) return true;  // an empty chunk would end the stream
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    if (!c_.write_and_wait(chunked_ ? size + data + "\r\n" : data)) broken_ = true;
    return !broken_;
  }
  bool connected() override {
    if (broken_) return false;
    switch (c_.client_present(/*in_stream=*/true)) {
      case Connection::Presence::kGone:
        return false;
      case Connection::Presence::kHalfClosed:
        // A comment event is the interim write: SSE clients skip it.
        if (!probed_) {
          probed_ = true;
          return write(":\n\n");
        }
        return true;
      default:
        return true;
    }
  }
  bool broken() const { return broken_; }

 private:
  Connection& c_;
  bool chunked_;
  bool broken_ = false, probed_ = false;
};

void Connection::handle(HttpRequest& req) {
  Router& router = *s_.router;
  HttpResponse res;
  try {
    res = router.handle(req);
  } catch (const std::exception& ex) {
    res = error_response(ApiError{500, std::string("internal error: ") + ex.what(), "internal_error", "", ""});
  }
  if (res.status == 499) {  // the client left while its request computed
    router.log(req, res.status, *res.log);
    return abort_from_worker();
  }
  if (!res.stream) {
    std::string bytes = response_head(*this, res, req.request_id, false);
    if (!head_) bytes += res.body;
    router.log(req, res.status, *res.log);
    return finish(std::move(bytes));
  }
  Engine::InFlight in_flight(s_.engine);
  if (!write_and_wait(response_head(*this, res, req.request_id, true))) {
    abandon_stream(res);
    router.log(req, res.status, *res.log);
    return abort_from_worker();
  }
  StreamSink sink(*this);
  res.stream(sink);
  router.log(req, res.status, *res.log);
  if (sink.broken()) return abort_from_worker();
  if (version_ == 10) keep_alive_ = false;
  finish(version_ == 11 ? "0\r\n\r\n" : "");
}

}  // namespace beast_adapter

void HttpServer::Impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (!acceptor.is_open()) return;
    if (ec) {
      // Out of descriptors (or a transient error): try again shortly rather
      // than spin; idle connections give theirs back meanwhile.
      relieve_pressure();
      accept_retry.expires_after(std::chrono::milliseconds(50));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (connections.size() >= max_connections) relieve_pressure();
    if (connections.size() >= max_connections) {
      // Every connection is busy with a request: refuse this one politely.
      const std::string body = ApiError{503, "too many open connections (--max-connections " + std::to_string(max_connections) + ")",
                                        "service_unavailable", "", "too_many_connections"}.to_json().dump();
      const std::string busy = status_line(11, 503) + "Content-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\n" +
                               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
      (void)::send(socket.native_handle(), busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      socket.close(ignored);
    } else {
      std::make_shared<Connection>(*this, std::move(socket))->start();
    }
    accept();
  });
}

// At the connection limit, a new client gets the place of a connection that
// is closing, else of the longest idle one, else of the slowest request head.
void HttpServer::Impl::relieve_pressure() {
  for (Connection::Phase phase : {Connection::Phase::kClosing, Connection::Phase::kIdle, Connection::Phase::kReading}) {
    Connection* victim = nullptr;
    for (Connection* c : connections)
      if (c->phase() == phase && (!victim || c->since() < victim->since())) victim = c;
    if (victim) {
      victim->close();
      return;
    }
  }
}

HttpServer::HttpServer(const ServeOptions& options, Engine* engine) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->engine = engine;
  impl_->router = std::make_unique<Router>(options, engine);
}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::bind() {
  Impl& s = *impl_;
  // Each connection is a descriptor: raise the soft limit to the hard one, and
  // keep the connection limit under it (with room for the model's files).
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  size_t limit = static_cast<size_t>(std::max(1, s.options.max_connections));
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && lim.rlim_cur > 128 &&
      limit > lim.rlim_cur - 128) {
    limit = lim.rlim_cur - 128;
    log_warn("serve: --max-connections lowered to " + std::to_string(limit) + " (open file limit " +
             std::to_string(lim.rlim_cur) + ")");
  }
  s.max_connections = limit;
  beast::error_code ec;
  const auto address = net::ip::make_address(s.options.host, ec);
  std::vector<tcp::endpoint> endpoints;
  if (!ec) {
    endpoints.emplace_back(address, static_cast<unsigned short>(s.options.port));
  } else {
    tcp::resolver resolver(s.io);
    auto results = resolver.resolve(s.options.host, std::to_string(s.options.port), ec);
    if (ec) return io_error("serve: cannot resolve --host " + s.options.host + ": " + ec.message());
    for (const auto& r : results) endpoints.push_back(r.endpoint());
  }
  const std::string where = s.options.host + ":" + (s.options.port == 0 ? std::string("any port") : std::to_string(s.options.port));
  for (const tcp::endpoint& e : endpoints) {
    beast::error_code err;
    s.acceptor.close(err);
    s.acceptor.open(e.protocol(), err);
    if (err) continue;
    s.acceptor.set_option(net::socket_base::reuse_address(true), err);
    s.acceptor.bind(e, err);
    if (err) continue;
    s.acceptor.listen(net::socket_base::max_listen_connections, err);
    if (err) continue;
    s.port = s.acceptor.local_endpoint().port();
    return Status::Ok();
  }
  return io_error("serve: cannot listen on " + where + " (in use, or not an address of this machine)");
}

int HttpServer::port() const { return impl_->port; }

bool HttpServer::listen() {
  Impl& s = *impl_;
  if (!s.acceptor.is_open()) return false;
  s.workers = std::make_unique<WorkerPool>(std::max(4, s.options.http_threads));
  s.probe_workers = std::make_unique<WorkerPool>(2);
  s.accept();
  s.running = true;
  s.io.run();
  s.running = false;
  return true;
}

void HttpServer::begin_drain() {
  Impl& s = *impl_;
  net::post(s.io, [&s] {
    s.draining = true;
    std::vector<Connection*> all(s.connections.begin(), s.connections.end());
    for (Connection* c : all) c->drain();
  });
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  auto done = std::make_shared<WriteWait>();
  net::post(s.io, [&s, done] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
    s.accept_retry.cancel();
    std::vector<Connection*> all(s.connections.begin(), s.connections.end());
    for (Connection* c : all) c->close();
    done->set(true);
  });
  // With the connections closed, the workers' writes fail and their requests
  // end (the engine cancelled them); then the event thread can stop.
  if (s.running) done->wait(std::chrono::seconds(5));
  if (s.workers) s.workers->join();
  if (s.probe_workers) s.probe_workers->join();
  s.io.stop();
}

}  // namespace loom::serve
