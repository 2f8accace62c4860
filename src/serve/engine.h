// The serving engine: the manager, the tokenizer and chat template, the limits,
// and the jobs of HTTP requests in flight. Routes translate a request into
// submit() and the job's outputs back into OpenAI's responses.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/batching/continuous_batching_manager.h"
#include "loom/structured/constraint.h"
#include "loom/serve/server.h"
#include "loom/tokenizer/chat_template.h"
#include "serve/api_error.h"
#include "serve/constraint_compiler.h"
#include "serve/metrics.h"
#include "serve/response_store.h"

namespace loom::serve {

// kFailed: the model can run no more steps (a tensor-parallel rank is gone);
// the server answers 503 until it exits.
enum class EngineState { kLoading, kReady, kDraining, kFailed };

// The choices of one HTTP request (prompts × n), each one manager sequence.
class Job {
 public:
  struct Event {
    int32_t choice = 0;
    batching::GenerationOutput output;
    size_t bytes = 0;  // about what `output` holds in memory
  };
  // The next output of any choice; nullopt after `timeout` seconds.
  std::optional<Event> next(double timeout);
  // Cancels every choice still running; their final outputs still arrive.
  void cancel();
  int32_t num_choices() const { return num_choices_; }
  bool done() const;  // every choice had its final output taken by next()

 private:
  friend class Engine;
  std::weak_ptr<batching::ContinuousBatchingManager> manager_;
  std::vector<std::string> request_ids_;        // as added (groups by their first id)
  std::unordered_map<std::string, int32_t> base_choice_;  // request id → its first choice
  int32_t num_choices_ = 0;
  int32_t finals_taken_ = 0;
  // Called on the batching thread. Outputs are cumulative, so once the
  // undelivered ones hold more than kPendingBytes, a choice's newest
  // undelivered output is superseded by its next one: a client that reads
  // slowly (or not at all) costs about kPendingBytes plus one output per
  // choice, not every step's copy of everything so far. Under the budget
  // every output is delivered, one event each.
  void push(int32_t choice, const batching::GenerationOutput& out);
  static constexpr size_t kPendingBytes = 16u << 20;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  int64_t popped_ = 0;                  // events taken by next() so far
  size_t pending_bytes_ = 0;            // Event::bytes of the events in the queue
  std::vector<int64_t> waiting_;        // per choice: the number of its event in the queue, or -1
};

class Engine {
 public:
  Engine(const ServeOptions& options) : options_(options) {}
  ~Engine();

  Status attach(ServedModel model);
  EngineState state() const { return state_.load(); }
  void begin_drain() {
    EngineState ready = EngineState::kReady, loading = EngineState::kLoading;
    if (!state_.compare_exchange_strong(ready, EngineState::kDraining))
      state_.compare_exchange_strong(loading, EngineState::kDraining);
  }
  // No more requests: `why` is what /health and new requests say (503).
  void fail(const std::string& why);
  // Why the engine does not take requests (503): loading, shutting down, or failed.
  std::string unavailable_reason() const;
  // Fails every request still running (the drain timed out).
  void cancel_everything();
  int64_t in_flight() const { return in_flight_.load(); }

  // The model's pieces (valid once attached).
  const std::string& served_model_name() const { return served_name_; }
  const std::string& model_dir() const { return model_.model_dir; }
  const Tokenizer* tokenizer() const { return model_.tokenizer.get(); }
  const tok::ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const GenerationConfig& generation_config() const { return model_.generation_config; }
  int64_t max_model_len() const { return max_model_len_; }
  size_t max_prompt_bytes() const {
    return options_.max_prompt_bytes > 0 ? options_.max_prompt_bytes : static_cast<size_t>(max_model_len_) * 64;
  }
  int64_t vocab_size() const { return vocab_; }
  double created_time() const { return created_; }
  // Output constraints compiled for the tokenizer, shared by every request (built on
  // first use; null without a tokenizer). engine_constraints.cc.
  structured::ConstraintRegistry* constraints();
  // Their compile threads and budgets (ServeOptions), built with the registry.
  ConstraintCompiler* constraint_compiler();
  // The registry's counts; zeros while no constrained request came (it is not built).
  structured::ConstraintRegistry::Stats constraint_stats() const;

  // 404 model_not_found unless `model` is unset or names the served model.
  std::optional<ApiError> check_model(const std::optional<std::string>& model) const;

  // Adds prompts × n sequences. Choice p × n + k is sequence k of prompt p.
  // With sampling, the n sequences of a prompt are one request that shares the
  // prompt's KV blocks (num_return_sequences); greedy ones are n requests.
  // `received` is when the HTTP request arrived (wall seconds), for TTFT.
  Result<std::shared_ptr<Job>> submit(const std::vector<std::vector<int32_t>>& prompts, int32_t n,
                                      const batching::RequestOptions& options, const std::string& id_base,
                                      double received);

  std::optional<batching::ManagerStats> stats() const;
  Metrics& metrics() { return *metrics_; }
  // Stored Responses (previous_response_id).
  ResponseStore& response_store() { return responses_; }
  bool metrics_ready() const { return metrics_ != nullptr; }

  // RAII count of requests in flight (drain waits for it to reach zero).
  class InFlight {
   public:
    explicit InFlight(Engine* e) : e_(e) { ++e_->in_flight_; }
    ~InFlight() { --e_->in_flight_; }
    InFlight(const InFlight&) = delete;
    InFlight& operator=(const InFlight&) = delete;

   private:
    Engine* e_;
  };

 private:
  void record_final(const batching::GenerationOutput& o, double received);

  ServeOptions options_;
  ServedModel model_;
  std::optional<tok::ChatTemplate> chat_template_;
  std::shared_ptr<batching::ContinuousBatchingManager> manager_;
  std::unique_ptr<Metrics> metrics_;
  std::string served_name_;
  int64_t max_model_len_ = 0;
  int64_t vocab_ = 0;
  double created_ = 0;
  std::atomic<EngineState> state_{EngineState::kLoading};
  mutable std::mutex failure_mu_;
  std::string failure_;  // set before state_ turns kFailed
  std::atomic<int64_t> in_flight_{0};
  std::atomic<uint64_t> next_id_{0};
  std::once_flag constraints_once_;
  std::unique_ptr<structured::ConstraintRegistry> constraints_;
  std::unique_ptr<ConstraintCompiler> constraint_compiler_;  // after the registry: stops first
  std::atomic<const structured::ConstraintRegistry*> constraints_built_{nullptr};  // for constraint_stats()
  ResponseStore responses_;
};

// "stop" | "length" | "abort" | "error": OpenAI's finish_reason (and vLLM's label) of a final output.
const char* finish_reason_label(const batching::GenerationOutput& o);

}  // namespace loom::serve
