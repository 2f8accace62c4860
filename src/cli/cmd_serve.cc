// `loom serve`: the OpenAI-compatible HTTP server (docs/serve.md). The port is
// bound first and /health says 503 while the model loads; SIGINT/SIGTERM drain
// in-flight requests (up to --shutdown-timeout) and exit 0. Under mpirun with
// --tensor-parallel N, rank 0 serves and the other ranks follow its steps.
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "cli/cb_flags.h"
#include "cli/commands.h"
#include "cli/common.h"
#include "loom/batching/generation_config_file.h"
#include "loom/runtime/collectives.h"
#include "loom/serve/server.h"

namespace loom::cli {

namespace {

struct ServeFlags {
  ModelOptions model;
  CbFlags cb;
  serve::ServeOptions serve;
  std::optional<uint64_t> seed;
  bool no_request_log = false;
  size_t constraint_cache_mb = 256;
  std::optional<int64_t> prompt_lookup_num_tokens;
};

// With --tensor-parallel, on rank 0: turns a fault of the process group (a
// rank that died or stopped answering within cpu_group_timeout) into a failed
// server: 503 and an error for every request, then a non-zero exit.
class GroupWatch {
 public:
  GroupWatch(runtime::Collectives* group, serve::Server* server) {
    if (!group) return;
    group->set_abort_on_fault(false);
    thread_ = std::thread([this, group, server] {
      std::unique_lock<std::mutex> lk(mu_);
      while (!cv_.wait_for(lk, std::chrono::milliseconds(50), [&] { return done_; })) {
        Status h = group->health();
        if (h.ok()) continue;
        lk.unlock();
        server->fail(h.message());
        return;
      }
    });
  }
  ~GroupWatch() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

std::shared_ptr<batching::ModelRunner> make_runner(const std::string& dir, const ServeFlags& f,
                                                   std::shared_ptr<models::Model>* model) {
  *model = load_model(dir, f.model, /*tensor_parallel_ok=*/true).value();
  return std::shared_ptr<batching::ModelRunner>(batching::ModelRunner::create(*model, f.model.backend).value());
}

void run_serve(const ServeFlags& f) {
  // Signals go to one thread that asks the server to drain; every thread made
  // from here on inherits the mask. The other ranks of a tensor-parallel job
  // leave them pending: rank 0 decides when the job ends.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not end the process

  const std::string dir = resolve_model_dir(f.model).value();
  apply_process_options(f.model);
  const batching::ContinuousBatchingConfig cb = make_cb_config(f.cb, f.seed);
  if (join_tensor_parallel(f.model).value() != 0) {
    std::shared_ptr<models::Model> model;
    std::shared_ptr<batching::ModelRunner> runner = make_runner(dir, f, &model);
    set_tensor_parallel_timeout(cb.cpu_group_timeout);
    follow_steps_unless_leader(*runner);
    return;
  }
  serve::ServeOptions so = f.serve;
  so.log_requests = !f.no_request_log;
  so.constraint_cache_bytes = f.constraint_cache_mb << 20;
  std::unique_ptr<serve::Server> server = serve::Server::create(so).value();
  throw_if_error(server->start());
  std::fprintf(stderr, "loom serve: listening on http://%s:%d (loading %s)\n", so.host.c_str(), server->port(), dir.c_str());
  std::fflush(stderr);

  serve::Server* raw = server.get();
  std::thread([signals, raw] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::fprintf(stderr, "loom serve: %s received, draining (send it again to stop at once)\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::thread([raw] { raw->shutdown(); }).detach();
    // A second signal: the operator does not want to wait for the drain.
    sigwait(&signals, &sig);
    std::fprintf(stderr, "loom serve: second %s, exiting now\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stderr);
    std::_Exit(128 + sig);
  }).detach();

  serve::ServedModel m;
  m.model_dir = dir;
  GenerationConfig gc = batching::generation_config_from_dir_or_default(dir).value();
  std::shared_ptr<models::Model> model;
  const std::shared_ptr<batching::ModelRunner> runner = make_runner(dir, f, &model);  // outlives the server
  m.runner = runner;
  gc.inherit_special_tokens(model->config().eos_token_ids, model->config().bos_token_id, model->config().pad_token_id);
  if (f.prompt_lookup_num_tokens) gc.prompt_lookup_num_tokens = *f.prompt_lookup_num_tokens;
  m.generation_config = gc;
  runtime::Collectives* group = runner->group();
  set_tensor_parallel_timeout(cb.cpu_group_timeout);
  // The other ranks stop once rank 0's manager (which runs the steps) is gone.
  StepsLeader leader(*runner);
  if (Tokenizer::exists_at(dir)) {
    m.tokenizer = Tokenizer::from_dir(dir).value();
    const auto& templates = m.tokenizer->chat_templates();
    if (auto it = templates.find("default"); it != templates.end()) m.chat_template = it->second;
  }
  m.cb_config = cb;
  int code = 0;
  {
    GroupWatch watch(group, raw);
    if (Status s = server->attach(std::move(m)); !s.ok()) {
      server->shutdown();
      server->wait();
      throw Error(s);
    }
    std::fprintf(stderr, "loom serve: ready on http://%s:%d%s\n", so.host.c_str(), server->port(),
                 group ? (" (tensor parallel over " + std::to_string(group->size()) + " ranks)").c_str() : "");
    std::fflush(stderr);
    code = server->wait();
  }
  std::fprintf(stderr, "loom serve: stopped\n");
  server.reset();
  if (group && !group->health().ok()) {
    // The other ranks may be stopped or waiting for a step: end them with this one.
    std::fprintf(stderr, "loom serve: error: %s; ending the job\n", group->health().message().c_str());
    group->abort(3);
  }
  if (code != 0) throw Error(internal_error("serve: the HTTP server stopped on an error"));
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server over continuous batching (docs/serve.md)");
  add_model_options(cmd, &f->model);
  cmd->add_option("--host", f->serve.host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", f->serve.port, "Port (default 8000; 0: any free port, printed at start)")->check(CLI::Range(0, 65535));
  cmd->add_option("--api-key", f->serve.api_key, "Require \"Authorization: Bearer KEY\" on every route but /health");
  cmd->add_option("--served-model-name", f->serve.served_model_name,
                  "The model name requests give and responses show (default: the model folder's name)");
  cmd->add_option("--max-model-len", f->serve.max_model_len,
                  "Prompt + completion token limit (default: the model's max_position_embeddings)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-body-bytes", f->serve.max_body_bytes, "Largest request body accepted (default 8 MiB; 413 beyond)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-prompt-bytes", f->serve.max_prompt_bytes,
                  "Largest prompt text, refused (400) before tokenizing (default: 64 bytes per token of --max-model-len)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--shutdown-timeout", f->serve.shutdown_timeout,
                  "Seconds in-flight requests may take to finish after SIGINT/SIGTERM (default 30)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--http-threads", f->serve.http_threads,
                  "Requests handled at once; a stream holds one until it ends, an idle connection none (default 64)")
      ->check(CLI::Range(4, 4096));
  cmd->add_option("--max-connections", f->serve.max_connections,
                  "Open connections; beyond it idle ones are closed first (default 1024)")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--request-timeout", f->serve.request_timeout,
                  "Seconds from a request's first byte to the end of its body (default 30; 408 beyond)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--write-timeout", f->serve.write_timeout,
                  "Seconds a client may take to accept each write of a reply or stream (default 30; then it is cut off)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--keep-alive-timeout", f->serve.keep_alive_timeout,
                  "Seconds an idle connection is kept between requests (default 30)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--constraint-timeout", f->serve.constraint_timeout,
                  "Seconds one output constraint (schema, grammar, regex, choice) may take to compile, its first "
                  "mask included (default 10; 400 beyond)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--constraint-max-elements", f->serve.constraint_max_elements,
                  "Grammar elements one output constraint may compile to; repetitions count each copy (default "
                  "2000000; 400 beyond)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--constraint-threads", f->serve.constraint_threads,
                  "Threads compiling output constraints, off the HTTP workers and the decoding step (default 1)")
      ->check(CLI::Range(1, 64));
  cmd->add_option("--constraint-cache-mb", f->constraint_cache_mb,
                  "MiB of compiled constraints and their masks kept for later requests, least recently used out "
                  "first (default 256)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-lookup-num-tokens", f->prompt_lookup_num_tokens,
                  "Speculative decoding for requests that do not set prompt_lookup_num_tokens: draft up to K tokens "
                  "per step from the text's own n-grams, verified in one forward (same output; default: "
                  "generation_config.json's, else 0 = off)")
      ->check(CLI::Range(int64_t{0}, kMaxPromptLookupTokens));
  cmd->add_option("--seed", f->seed, "Seed of sampled requests that give none (default: a random one each)");
  cmd->add_flag("--no-request-log", f->no_request_log, "No log line per request on stderr");
  add_cb_options(cmd, &f->cb);
  cmd->callback([f] { run_serve(*f); });
}

}  // namespace loom::cli
