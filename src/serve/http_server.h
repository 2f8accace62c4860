// The HTTP side of `loom serve`, behind which the HTTP library stays hidden.
#pragma once

#include <memory>

#include "loom/core/status.h"
#include "loom/serve/server.h"
#include "serve/engine.h"

namespace loom::serve {

class HttpServer {
 public:
  HttpServer(const ServeOptions& options, Engine* engine);
  ~HttpServer();
  Status bind();  // listens on options.host:port (port 0: any free one)
  int port() const;
  bool listen();  // serves until stop(); false when it could not
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve
