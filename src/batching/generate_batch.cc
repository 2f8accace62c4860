#include "loom/batching/generate_batch.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <unordered_map>

namespace loom::batching {

const GenerationOutput* BatchResult::find(const std::string& request_id) const {
  for (const GenerationOutput& o : outputs)
    if (o.request_id == request_id) return &o;
  return nullptr;
}

Result<BatchResult> generate_batch(std::shared_ptr<ModelRunner> runner, const std::vector<BatchInput>& inputs,
                                   const GenerationConfig& generation_config,
                                   const ContinuousBatchingConfig& cb_config, const GenerateBatchOptions& options) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  std::shared_ptr<ContinuousBatchingManager> manager;
  if (options.persistent_manager && *options.persistent_manager) {
    manager = *options.persistent_manager;
  } else {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<ContinuousBatchingManager> m,
                          ContinuousBatchingManager::create(runner, generation_config, cb_config, options.manager));
    manager = std::move(m);
    if (options.persistent_manager) *options.persistent_manager = manager;
  }
  if (options.warmup) LOOM_RETURN_IF_ERROR(manager->warmup());
  LOOM_RETURN_IF_ERROR(manager->start());
  const ManagerStats before = manager->stats();

  // Outputs come through per-request handlers, so a shared (persistent) manager's
  // other outputs stay in its queue for their owners.
  struct Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<GenerationOutput> finals;
  };
  auto inbox = std::make_shared<Inbox>();
  auto on_output = [inbox](const GenerationOutput& o) {
    if (!o.is_final()) return;
    {
      std::lock_guard<std::mutex> lk(inbox->mu);
      inbox->finals.push_back(o);
    }
    inbox->cv.notify_all();
  };

  // An input with num_return_sequences = n fills n consecutive slots.
  BatchResult result;
  std::vector<size_t> first_slot(inputs.size());
  size_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    first_slot[i] = total;
    total += static_cast<size_t>(std::max<int64_t>(
        1, inputs[i].options.num_return_sequences.value_or(static_cast<int32_t>(generation_config.num_return_sequences))));
  }
  result.outputs.resize(total);
  std::unordered_map<std::string, size_t> slot;
  size_t pending = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    RequestOptions o = inputs[i].options;
    o.record_timestamps = options.record_timestamps;
    if (!o.queue_timeout) o.queue_timeout = 1e9;  // with max_queue_size: wait for room, do not fail
    const size_t n = (i + 1 < inputs.size() ? first_slot[i + 1] : total) - first_slot[i];
    Result<std::string> id = manager->add_request(inputs[i].input_ids, o);
    const std::string base = id.ok() ? *id : o.request_id.value_or("input_" + std::to_string(i));
    for (size_t k = 0; k < n; ++k) {
      const std::string seq_id = k == 0 ? base : base + "#" + std::to_string(k);
      GenerationOutput& out = result.outputs[first_slot[i] + k];
      if (id.ok()) {
        slot[seq_id] = first_slot[i] + k;
        ++pending;
        continue;
      }
      out.request_id = seq_id;
      out.sequence_index = static_cast<int32_t>(k);
      if (k > 0) out.parent_request_id = base;
      out.prompt_ids = inputs[i].input_ids;
      out.status = RequestStatus::kFailed;
      out.finish_reason = generation::FinishReason::kError;
      out.error = id.status().to_string();
      out.error_code = id.status().code();
    }
    if (id.ok()) LOOM_RETURN_IF_ERROR(manager->register_result_handler(*id, on_output));
  }

  auto report = [&](int64_t done) {
    if (!options.progress) return;
    const ManagerStats s = manager->stats();
    BatchProgress p;
    p.done = done;
    p.total = static_cast<int64_t>(total);
    p.generated_tokens = s.generated_tokens - before.generated_tokens;
    p.elapsed_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    p.tokens_per_second = p.elapsed_seconds > 0 ? static_cast<double>(p.generated_tokens) / p.elapsed_seconds : 0;
    p.pages_in_use = s.pages_in_use;
    p.pages_capacity = s.pages_capacity;
    options.progress(p);
  };
  int64_t done = static_cast<int64_t>(total - pending);
  report(done);
  Status failure;
  while (pending > 0) {
    std::optional<GenerationOutput> out;
    {
      std::unique_lock<std::mutex> lk(inbox->mu);
      inbox->cv.wait_for(lk, std::chrono::duration<double>(options.progress_interval),
                         [&] { return !inbox->finals.empty(); });
      if (!inbox->finals.empty()) {
        out = std::move(inbox->finals.front());
        inbox->finals.pop_front();
      }
    }
    if (!out) {
      if (!manager->is_running()) {
        failure = internal_error("generate_batch: the batching loop ended with " + std::to_string(pending) +
                                 " requests unfinished" +
                                 (manager->fatal_error() ? ": " + manager->fatal_error()->to_string() : std::string()));
        break;
      }
      report(done);
      continue;
    }
    auto it = slot.find(out->request_id);
    if (it == slot.end()) continue;
    result.outputs[it->second] = std::move(*out);
    slot.erase(it);
    --pending;
    report(++done);
  }
  result.stats = manager->stats();
  result.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!options.persistent_manager) manager->destroy();
  if (!failure.ok()) return failure;
  return result;
}

}  // namespace loom::batching
