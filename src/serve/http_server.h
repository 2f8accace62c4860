// The HTTP side of `loom serve`, behind which the HTTP library stays hidden.
#pragma once

#include <memory>

#include "loom/core/status.h"
#include "loom/serve/server.h"
#include "serve/engine.h"

namespace loom::serve {

namespace beast_adapter {
class Connection;
}

class HttpServer {
 public:
  HttpServer(const ServeOptions& options, Engine* engine);
  ~HttpServer();
  Status bind();  // listens on options.host:port (port 0: any free one)
  int port() const;
  bool listen();  // serves until stop(); false when it could not
  // Idle and half-read connections close now; each reply from now on closes its
  // connection. The port stays open so that /health can say 503.
  void begin_drain();
  void stop();  // closes every connection and stops serving

 private:
  friend class beast_adapter::Connection;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve
