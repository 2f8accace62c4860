#include "serve/engine.h"

#include <chrono>
#include <filesystem>

#include "loom/batching/tokenizer_text_stream.h"
#include "loom/core/logging.h"
#include "loom/runtime/collectives.h"

namespace loom::serve {

namespace {
double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

const char* finish_reason_label(const batching::GenerationOutput& o) {
  using generation::FinishReason;
  switch (o.finish_reason) {
    case FinishReason::kEos:
    case FinishReason::kStopString:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "abort";
    default:
      return "error";
  }
}

std::optional<Job::Event> Job::next(double timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_for(lk, std::chrono::duration<double>(timeout), [&] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  ++popped_;
  pending_bytes_ -= e.bytes;
  if (e.output.is_final()) ++finals_taken_;
  return e;
}

// What an output holds: its per-token vectors (a top-logprob entry is 8 bytes)
// and its text.
size_t output_bytes(const batching::GenerationOutput& o) {
  size_t top = 0;
  for (const auto& t : o.top_logprobs) top += 24 + 8 * t.size();
  return o.generated_tokens.size() * 16 + top + o.text.size() + 8 * o.prompt_logprobs.size() +
         24 * o.prompt_top_logprobs.size() + o.prompt_ids.size() * 4 + 256;
}

void Job::push(int32_t choice, const batching::GenerationOutput& out) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (choice < 0 || choice >= num_choices_) return;
    if (waiting_.empty()) waiting_.assign(static_cast<size_t>(num_choices_), -1);
    int64_t& waiting = waiting_[static_cast<size_t>(choice)];
    const size_t bytes = output_bytes(out);
    if (waiting >= popped_ && pending_bytes_ + bytes > kPendingBytes) {
      Event& e = events_[static_cast<size_t>(waiting - popped_)];  // superseded: never delivered
      pending_bytes_ = pending_bytes_ - e.bytes + bytes;
      e.output = out;
      e.bytes = bytes;
    } else {
      events_.push_back({choice, out, bytes});
      pending_bytes_ += bytes;
      waiting = popped_ + static_cast<int64_t>(events_.size()) - 1;
    }
    if (out.is_final()) waiting = -1;  // nothing may replace a final output
  }
  cv_.notify_all();
}

bool Job::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return finals_taken_ >= num_choices_;
}

void Job::cancel() {
  auto m = manager_.lock();
  if (!m) return;
  for (const std::string& id : request_ids_) (void)m->cancel_request(id);  // NotFound: it ended meanwhile
}

Engine::~Engine() {
  if (manager_) manager_->destroy();
}

Status Engine::attach(ServedModel model) {
  model_ = std::move(model);
  if (!model_.runner) return invalid_argument("serve: no model to attach");
  vocab_ = model_.runner->model().vocab_size();
  served_name_ = options_.served_model_name;
  if (served_name_.empty()) served_name_ = std::filesystem::path(model_.model_dir).filename().string();
  if (served_name_.empty()) served_name_ = std::filesystem::path(model_.model_dir).parent_path().filename().string();
  const int64_t model_len = model_.runner->model().config().max_position_embeddings;
  max_model_len_ = options_.max_model_len > 0 ? options_.max_model_len : model_len;
  if (max_model_len_ <= 0) return invalid_argument("serve: the model's config.json has no max_position_embeddings; give --max-model-len");
  if (model_len > 0 && options_.max_model_len > model_len)
    log_warn("serve: --max-model-len " + std::to_string(options_.max_model_len) +
             " is beyond the model's max_position_embeddings (" + std::to_string(model_len) + ")");
  if (!model_.chat_template.empty()) {
    const Tokenizer& t = *model_.tokenizer;
    LOOM_ASSIGN_OR_RETURN(tok::ChatTemplate tmpl, tok::ChatTemplate::create(model_.chat_template, t.bos_token().value_or(""),
                                                                           t.eos_token().value_or("")));
    chat_template_ = std::move(tmpl);
  }
  batching::ManagerOptions mo;
  if (model_.tokenizer) {
    std::shared_ptr<Tokenizer> tok = model_.tokenizer;
    mo.text_stream = [tok](const std::vector<int32_t>& prompt) -> std::unique_ptr<batching::TextStream> {
      auto s = std::make_unique<batching::TokenizerTextStream>(tok);
      s->start(prompt);
      return s;
    };
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<batching::ContinuousBatchingManager> m,
                        batching::ContinuousBatchingManager::create(model_.runner, model_.generation_config,
                                                                    model_.cb_config, std::move(mo)));
  manager_ = std::move(m);
  LOOM_RETURN_IF_ERROR(manager_->start());
  LOOM_RETURN_IF_ERROR(manager_->warmup());
  metrics_ = std::make_unique<Metrics>(served_name_);
  created_ = wall_now();
  state_ = EngineState::kReady;
  return Status::Ok();
}

void Engine::fail(const std::string& why) {
  {
    std::lock_guard<std::mutex> lk(failure_mu_);
    if (failure_.empty()) failure_ = why;
  }
  state_ = EngineState::kFailed;
}

std::string Engine::unavailable_reason() const {
  switch (state_.load()) {
    case EngineState::kLoading:
      return "the model is still loading";
    case EngineState::kFailed: {
      std::lock_guard<std::mutex> lk(failure_mu_);
      return "the server can run the model no more (" + failure_ + ")";
    }
    default:
      return "the server is shutting down";
  }
}

void Engine::cancel_everything() {
  if (manager_) (void)manager_->stop(/*block=*/true, /*timeout=*/10.0, /*keep_for_next_session=*/false, /*hard_stop=*/true);
}

std::optional<ApiError> Engine::check_model(const std::optional<std::string>& model) const {
  if (!model || *model == served_name_ || *model == model_.model_dir) return std::nullopt;
  ApiError e;
  e.status = 404;
  e.param = "model";
  e.code = "model_not_found";
  e.message = "The model '" + *model + "' does not exist; this server serves '" + served_name_ + "'";
  return e;
}

std::optional<batching::ManagerStats> Engine::stats() const {
  if (!manager_) return std::nullopt;
  return manager_->stats();
}

void Engine::record_final(const batching::GenerationOutput& o, double received) {
  FinishedSequence s;
  s.finished_reason = finish_reason_label(o);
  if (o.lifespan.first > 0) s.queue_seconds = o.lifespan.first - o.created_time;
  if (!o.timestamps.empty()) {
    s.ttft_seconds = o.timestamps.front() - received;
    for (size_t i = 1; i < o.timestamps.size(); ++i) s.inter_token_seconds.push_back(o.timestamps[i] - o.timestamps[i - 1]);
  }
  s.e2e_seconds = (o.lifespan.second > 0 ? o.lifespan.second : wall_now()) - received;
  metrics_->record(s);
}

Result<std::shared_ptr<Job>> Engine::submit(const std::vector<std::vector<int32_t>>& prompts, int32_t n,
                                            const batching::RequestOptions& options, const std::string& id_base,
                                            double received) {
  if (state_ != EngineState::kReady || !manager_) return Status(ErrorCode::kFailedPrecondition, unavailable_reason());
  auto job = std::make_shared<Job>();
  job->manager_ = manager_;
  job->num_choices_ = static_cast<int32_t>(prompts.size()) * n;
  // The handler only queues: it runs on the batching thread.
  std::weak_ptr<Job> weak = job;
  const std::string base = id_base + "-" + std::to_string(next_id_++);
  const GenerationConfig& gc = generation_config();
  const bool sampling = options.do_sample.value_or(gc.do_sample) &&
                        options.temperature.value_or(static_cast<float>(gc.temperature)) > 0;
  if (n > 1 && sampling && model_.runner->group() && model_.runner->group()->size() > 1)
    return invalid_argument("n > 1 with sampling under --tensor-parallel: the n sequences would share forked K/V "
                            "pages, which are copied on rank 0 only; send n separate requests");
  const int32_t per_prompt = n > 1 && sampling ? 1 : n;  // requests per prompt
  // Every id and its choice is known before the first request is added: the
  // handlers read the map from the batching thread.
  struct Planned {
    size_t prompt;
    std::string id;
  };
  std::vector<Planned> planned;
  for (size_t p = 0; p < prompts.size(); ++p)
    for (int32_t k = 0; k < per_prompt; ++k) {
      const int32_t choice = static_cast<int32_t>(p) * n + k;
      planned.push_back({p, base + "-" + std::to_string(choice)});
      job->base_choice_[planned.back().id] = choice;
    }
  auto handler = [this, weak, received](const batching::GenerationOutput& out) {
    if (out.is_final()) record_final(out, received);
    auto j = weak.lock();
    if (!j) return;
    const std::string& group = out.parent_request_id.empty() ? out.request_id : out.parent_request_id;
    auto it = j->base_choice_.find(group);
    if (it == j->base_choice_.end()) return;
    j->push(it->second + out.sequence_index, out);
  };
  for (const Planned& pl : planned) {
    batching::RequestOptions o = options;
    o.record_timestamps = true;
    o.request_id = pl.id;
    o.num_return_sequences = n > 1 && sampling ? n : 1;
    Result<std::string> id = manager_->add_request(prompts[pl.prompt], o);
    if (!id.ok()) {
      job->cancel();
      const std::string where = prompts.size() > 1 ? "prompt " + std::to_string(pl.prompt) + ": " : "";
      return Status(id.status().code(), where + id.status().message());
    }
    job->request_ids_.push_back(*id);
    if (Status h = manager_->register_result_handler(*id, handler); !h.ok()) {
      job->cancel();
      return h;
    }
  }
  return job;
}

}  // namespace loom::serve
