#include "loom/serve/server.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "loom/core/logging.h"
#include "serve/engine.h"
#include "serve/http_server.h"

namespace loom::serve {

struct Server::Impl {
  ServeOptions options;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<HttpServer> http;
  std::thread listener;
  std::mutex mu;
  std::condition_variable cv;
  bool serving = false, stopped = false, shutting_down = false;
  bool stop_done = false;  // shutdown() or fail() has returned from http->stop()
  int exit_code = 0;
};

Result<std::unique_ptr<Server>> Server::create(ServeOptions options) {
  if (options.max_body_bytes == 0) return invalid_argument("serve: --max-body-bytes must be > 0");
  if (options.shutdown_timeout < 0) return invalid_argument("serve: --shutdown-timeout must be ≥ 0");
  if (options.port < 0 || options.port > 65535) return invalid_argument("serve: --port must be in [0, 65535]");
  std::unique_ptr<Server> s(new Server());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->options = options;
  s->impl_->engine = std::make_unique<Engine>(options);
  s->impl_->http = std::make_unique<HttpServer>(options, s->impl_->engine.get());
  LOOM_RETURN_IF_ERROR(s->impl_->http->bind());
  return s;
}

Server::~Server() {
  if (!impl_) return;
  impl_->http->stop();
  if (impl_->listener.joinable()) impl_->listener.join();
}

int Server::port() const { return impl_->http->port(); }

Status Server::start() {
  Impl& s = *impl_;
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.serving) return Status::Ok();
  s.serving = true;
  s.listener = std::thread([&s] {
    const bool ok = s.http->listen();
    std::lock_guard<std::mutex> lk(s.mu);
    if (!ok && !s.shutting_down) s.exit_code = 1;
    s.stopped = true;
    s.cv.notify_all();
  });
  return Status::Ok();
}

Status Server::attach(ServedModel model) { return impl_->engine->attach(std::move(model)); }

void Server::shutdown() {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.shutting_down) return;
    s.shutting_down = true;
  }
  s.engine->begin_drain();
  s.http->begin_drain();
  log_info("serve: shutting down; waiting up to " + std::to_string(s.options.shutdown_timeout) + " s for " +
           std::to_string(s.engine->in_flight()) + " request(s) in flight");
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(s.options.shutdown_timeout);
  while (s.engine->in_flight() > 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (s.engine->in_flight() > 0) {
    log_warn("serve: " + std::to_string(s.engine->in_flight()) + " request(s) still running after --shutdown-timeout; failing them");
    s.engine->cancel_everything();
    // Their routes now write the error and end (within a step); a moment is
    // enough, and then every connection closes anyway.
    const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (s.engine->in_flight() > 0 && std::chrono::steady_clock::now() < grace)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  s.http->stop();
  std::lock_guard<std::mutex> lk(s.mu);
  s.stop_done = true;
  s.cv.notify_all();
}

void Server::fail(const std::string& why) {
  Impl& s = *impl_;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.exit_code = 1;
    if (s.shutting_down) {  // a drain is under way: it now fails what is left
      s.engine->fail(why);
      return;
    }
    s.shutting_down = true;
  }
  s.engine->fail(why);
  log_error("serve: " + why + "; failing " + std::to_string(s.engine->in_flight()) + " request(s) in flight and stopping");
  // The steps of the requests in flight fail at once now; their routes write
  // the error (an error event on a stream) and end.
  const auto failed = std::chrono::steady_clock::now();
  while (s.engine->in_flight() > 0 && std::chrono::steady_clock::now() < failed + std::chrono::seconds(5))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (s.engine->in_flight() > 0) s.engine->cancel_everything();
  // A second of 503s lets a load balancer's health check see why, rather
  // than only a refused connection.
  std::this_thread::sleep_until(failed + std::chrono::seconds(1));
  s.http->stop();
  std::lock_guard<std::mutex> lk(s.mu);
  s.stop_done = true;
  s.cv.notify_all();
}

int Server::wait() {
  Impl& s = *impl_;
  std::unique_lock<std::mutex> lk(s.mu);
  // The thread that stops the server must be out of it before the caller may
  // destroy it.
  s.cv.wait(lk, [&] { return (s.stopped || !s.serving) && (!s.shutting_down || s.stop_done); });
  lk.unlock();
  if (s.listener.joinable()) s.listener.join();
  return s.exit_code;
}

}  // namespace loom::serve
