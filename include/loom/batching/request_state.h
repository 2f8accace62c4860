// A request inside the batching loop: its tokens, where its K/V stand, how it
// samples and when it stops. Owned by the manager, touched only by the loop
// thread (and the planning thread of async batching, which runs while the loop
// thread computes a step and touches nothing else).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/batching/draft_length.h"
#include "loom/batching/generate.h"
#include "loom/batching/generation_output.h"
#include "loom/batching/paged_kv_cache.h"
#include "loom/batching/request_options.h"
#include "loom/batching/token_finisher.h"
#include "loom/generation/sampling.h"
#include "loom/structured/constraint.h"

namespace loom::batching {

struct RequestState {
  std::string id;
  uint64_t arrival = 0;  // admission order to the manager: lower goes first, and is preempted last
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;  // prompt + generated
  std::vector<float> logprobs;
  bool want_logprobs = false;  // the config's return_logprobs or the request's own
  int32_t top_logprobs_k = 0;
  std::vector<std::vector<generation::TokenLogprob>> top_logprobs;
  // Prompt log-probabilities (RequestOptions::prompt_logprobs): -1 when not
  // asked; prompt_logprob_next is the next prompt position to record (from 1).
  int32_t prompt_logprobs_k = -1;
  size_t prompt_logprob_next = 1;
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<generation::TokenLogprob>> prompt_top_logprobs;
  std::vector<double> timestamps;
  int64_t max_new_tokens = 0;
  int64_t max_length = 0;  // prompt + max_new_tokens: the most positions it can hold

  // K/V: positions [0, num_computed) are in the cache (committed steps);
  // `inflight` more are being computed by the running step.
  SequenceKv kv;
  int64_t num_computed = 0;
  int64_t inflight = 0;

  // Speculative decoding: how many tokens to draft (0: never), the step's feed
  // [last token, drafted...] while a verification step runs, and the totals.
  DraftLength draft_length;
  std::vector<int32_t> draft_feed;
  int64_t drafted_tokens = 0, accepted_draft_tokens = 0;

  generation::SamplingParams sampling;
  generation::Rng rng;
  std::unique_ptr<TextStream> text_stream;  // null without a tokenizer
  TokenFinisher finisher;  // EOS ids, stop strings, max_new_tokens; reads text_stream
  std::string text;
  // The request's position in its grammar (RequestOptions::constraint), if any.
  std::optional<structured::ConstraintState> constraint;
  // RequestOptions::thinking_budget, and from which generated count its close
  // tokens are forced (-1: not decided yet; kThinkingLeftAlone: never).
  std::optional<ThinkingBudget> thinking;
  int64_t thinking_forced_from = -1;
  static constexpr int64_t kThinkingLeftAlone = -2;

  // num_return_sequences: the sequences (index, id) still to fork from this one
  // once its prompt is computed, and their RNG seeds' base. A forked sequence
  // knows its index and parent.
  std::vector<std::pair<int32_t, std::string>> forks;
  uint64_t seed = 0;
  int32_t sequence_index = 0;
  std::string parent_id;

  bool streaming = false;
  bool record_timestamps = false;
  RequestStatus status = RequestStatus::kPending;
  generation::FinishReason finish_reason = generation::FinishReason::kNone;
  Status error;
  double created_time = 0;
  double first_scheduled_time = -1;
  double end_time = -1;

  // The prompt rows still have to come out of the model: prefix-cache hits would skip them.
  bool needs_prompt_rows() const { return prompt_logprobs_k >= 0 && prompt_logprob_next < prompt.size(); }
  int64_t generated() const { return static_cast<int64_t>(tokens.size() - prompt.size()); }
  // Positions fed once the running step ends, and tokens known by then (a step
  // that feeds the last known token samples one more, unless that ends the request).
  int64_t next_position() const { return num_computed + inflight; }
  int64_t projected_length() const {
    const int64_t n = static_cast<int64_t>(tokens.size());
    return inflight > 0 && next_position() == n ? n + 1 : n;
  }
  bool projected_done() const {
    return inflight > 0 && next_position() == static_cast<int64_t>(tokens.size()) && generated() + 1 >= max_new_tokens;
  }
};

}  // namespace loom::batching
