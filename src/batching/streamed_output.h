// The cumulative output of a streaming request, kept beside the delivery path so that
// a streamed step costs the loop only what the step added: catch_up() appends the
// new tokens, logprobs, timestamps and text (the request's own vectors only grow), and
// the queue holds a Mark (how much of it an output saw) instead of a copy. A caller
// who takes an output gets its copy then, on its own thread; an inline result handler
// reads current() during its call without any copy.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "loom/batching/generation_output.h"
#include "loom/batching/request_state.h"

namespace loom::batching {

class StreamedOutput {
 public:
  // How much of the output one streamed step saw, and its status then.
  struct Mark {
    size_t tokens = 0, logprobs = 0, top_logprobs = 0, timestamps = 0, text = 0;
    RequestStatus status = RequestStatus::kPending;
    std::pair<double, double> lifespan{-1.0, -1.0};
  };

  // Loop thread: brings the output up to `r` and returns the mark of this step.
  Mark catch_up(const RequestState& r) {
    std::lock_guard<std::mutex> lk(mu_);
    GenerationOutput& o = out_;
    if (o.request_id.empty()) {  // the first step: what does not change from here on
      o.request_id = r.id;
      o.sequence_index = r.sequence_index;
      o.parent_request_id = r.parent_id;
      o.prompt_ids = r.prompt;
      o.prompt_logprobs = r.prompt_logprobs;
      o.prompt_top_logprobs = r.prompt_top_logprobs;
      o.created_time = r.created_time;
    }
    o.generated_tokens.insert(o.generated_tokens.end(),
                              r.tokens.begin() + static_cast<std::ptrdiff_t>(r.prompt.size() + o.generated_tokens.size()),
                              r.tokens.end());
    append_tail(o.logprobs, r.logprobs);
    append_tail(o.top_logprobs, r.top_logprobs);
    append_tail(o.timestamps, r.timestamps);
    o.text.append(r.text, o.text.size());
    o.status = r.status;
    o.lifespan = {r.first_scheduled_time, r.end_time};
    return Mark{o.generated_tokens.size(), o.logprobs.size(), o.top_logprobs.size(), o.timestamps.size(), o.text.size(),
                o.status, o.lifespan};
  }

  // The output as it stood at `m` (any thread).
  GenerationOutput at(const Mark& m) const {
    std::lock_guard<std::mutex> lk(mu_);
    GenerationOutput o;
    o.request_id = out_.request_id;
    o.sequence_index = out_.sequence_index;
    o.parent_request_id = out_.parent_request_id;
    o.prompt_ids = out_.prompt_ids;
    o.prompt_logprobs = out_.prompt_logprobs;
    o.prompt_top_logprobs = out_.prompt_top_logprobs;
    o.created_time = out_.created_time;
    o.generated_tokens.assign(out_.generated_tokens.begin(), out_.generated_tokens.begin() + static_cast<std::ptrdiff_t>(m.tokens));
    o.logprobs.assign(out_.logprobs.begin(), out_.logprobs.begin() + static_cast<std::ptrdiff_t>(m.logprobs));
    o.top_logprobs.assign(out_.top_logprobs.begin(), out_.top_logprobs.begin() + static_cast<std::ptrdiff_t>(m.top_logprobs));
    o.timestamps.assign(out_.timestamps.begin(), out_.timestamps.begin() + static_cast<std::ptrdiff_t>(m.timestamps));
    o.text.assign(out_.text, 0, m.text);
    o.status = m.status;
    o.lifespan = m.lifespan;
    return o;
  }

  // The output as of the last catch_up; only the loop thread (its one writer) may read it unlocked.
  const GenerationOutput& current() const { return out_; }
  // Set by the first catch_up, before any mark leaves the loop thread, and never changed.
  const std::string& parent_request_id() const { return out_.parent_request_id; }

 private:
  template <typename T>
  static void append_tail(std::vector<T>& to, const std::vector<T>& from) {
    if (from.size() > to.size()) to.insert(to.end(), from.begin() + static_cast<std::ptrdiff_t>(to.size()), from.end());
  }

  mutable std::mutex mu_;
  GenerationOutput out_;
};

}  // namespace loom::batching
