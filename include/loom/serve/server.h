// `loom serve`: an OpenAI-compatible HTTP server over one ContinuousBatchingManager.
// Every generation request becomes add_request calls; streams are fed by the
// manager's result handlers. The port is bound (and /health answers 503) before
// the model is attached, so a load balancer sees the replica while it loads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "loom/batching/continuous_batching_config.h"
#include "loom/batching/model_runner.h"
#include "loom/core/status.h"
#include "loom/generation/generation_config.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: an ephemeral port (see Server::port())
  std::string api_key;  // non-empty: every route but /health needs "Authorization: Bearer <key>"
  std::string served_model_name;  // the name `model` must give; default: the model folder's name
  int64_t max_model_len = 0;      // prompt + completion limit; 0: the model's max_position_embeddings
  size_t max_body_bytes = 8u << 20;
  // Largest prompt text, checked before it is tokenized (tokenizing costs far
  // more memory than the text); 0: 64 bytes per token of max_model_len.
  size_t max_prompt_bytes = 0;
  double shutdown_timeout = 30;  // seconds in-flight requests get to finish on SIGINT/SIGTERM
  int http_threads = 64;         // requests handled at once (each stream holds one until it ends)
  int max_connections = 1024;    // open connections; idle ones are closed first beyond it
  double request_timeout = 30;   // seconds from a request's first byte to the end of its body
  double write_timeout = 30;     // seconds a client may take to accept one write
  double keep_alive_timeout = 30;  // seconds an idle connection is kept between requests
  size_t max_header_bytes = 16u << 10;  // request line + header fields (414/431 beyond)
  int max_headers = 100;                // header fields (431 beyond)
  bool log_requests = true;      // one line per request on stderr
  // Output constraints (response_format, guided_*, forced tool calls) compile on
  // threads of their own, each within a time and grammar-size budget; compiled ones
  // are kept, least recently used out first, within a byte budget.
  int constraint_threads = 1;
  size_t max_pending_constraints = 32;     // waiting to compile (503 beyond)
  double constraint_timeout = 10;          // seconds per compilation, its first mask included
  size_t constraint_max_elements = 2000000;  // grammar elements per constraint
  size_t constraint_cache_bytes = size_t{256} << 20;
};

// What the server runs, prepared by the front end (model, kernels, precision).
struct ServedModel {
  std::shared_ptr<batching::ModelRunner> runner;
  std::shared_ptr<Tokenizer> tokenizer;  // null: token-id prompts only, no chat
  std::string chat_template;             // the template's source; empty: no /v1/chat/completions
  GenerationConfig generation_config;    // request defaults (eos ids included)
  batching::ContinuousBatchingConfig cb_config;
  std::string model_dir;
};

class Server {
 public:
  // Binds host:port. Errors: the address is in use or cannot be bound.
  static Result<std::unique_ptr<Server>> create(ServeOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const;
  // Serves in the background from now on; generation routes say 503 until attach().
  Status start();
  // Builds the manager over the model, warms it up, and turns the server ready.
  Status attach(ServedModel model);
  // Stop accepting (503), let in-flight requests finish for shutdown_timeout,
  // fail the rest, stop serving. Safe from any thread but a signal handler.
  void shutdown();
  // The model can run no more (a tensor-parallel rank is gone): new requests
  // and /health get 503 saying `why`, requests in flight end with an error,
  // then the server stops and wait() returns non-zero.
  void fail(const std::string& why);
  // Blocks until the server stopped serving (after shutdown() or a fatal error).
  // 0 after a clean shutdown.
  int wait();

 private:
  Server() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::serve
