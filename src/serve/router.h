// What both HTTP adapters share, above the HTTP library: the route table,
// authentication, lifecycle states (503 while loading or draining), 404/405,
// the request id, the per-request log line and the HTTP metric.
#pragma once

#include <string>

#include "loom/serve/server.h"
#include "serve/engine.h"
#include "serve/http.h"

namespace loom::serve {

class Router {
 public:
  Router(const ServeOptions& options, Engine* engine) : options_(options), engine_(engine) {}

  // Sets the request id (X-Request-Id, else a new one) and the arrival time;
  // header names must already be lower case.
  void prepare(HttpRequest& req) const;
  HttpResponse handle(const HttpRequest& req);
  void log(const HttpRequest& req, int status, const RequestLog& log) const;
  Engine& engine() { return *engine_; }

 private:
  HttpResponse route(const HttpRequest& req);
  ServeOptions options_;
  Engine* engine_;
};

// A streamed response whose client left before the stream started: runs it on
// a sink that is already gone, so it cancels its job at once.
void abandon_stream(HttpResponse& res);

}  // namespace loom::serve
