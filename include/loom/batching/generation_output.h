// What a caller gets back for a request: a snapshot (never a live view) of its
// tokens, status and timing, as in Transformers' GenerationOutput.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/status.h"
#include "loom/generation/sampling.h"
#include "loom/generation/stopping.h"

namespace loom::batching {

// PENDING: queued (or preempted and waiting to resume); PREFILLING: its prompt
// (or, after a preemption by recompute, prompt + generated) is being computed;
// DECODING: generating; FINISHED and FAILED are final.
enum class RequestStatus { kPending, kPrefilling, kDecoding, kFinished, kFailed };
const char* request_status_name(RequestStatus s);  // "PENDING", …

struct GenerationOutput {
  std::string request_id;
  // With num_return_sequences > 1: which sequence (0 for the request itself,
  // k for "<request_id>#<k>") and the id the request was added under.
  int32_t sequence_index = 0;
  std::string parent_request_id;
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_tokens;
  std::vector<float> logprobs;  // one per generated token with return_logprobs (or the request's logprobs), else empty
  // With RequestOptions::top_logprobs: the alternatives at each generated position.
  std::vector<std::vector<generation::TokenLogprob>> top_logprobs;
  // With RequestOptions::prompt_logprobs: one per prompt token after the first,
  // and the alternatives at each of those positions.
  std::vector<float> prompt_logprobs;
  std::vector<std::vector<generation::TokenLogprob>> prompt_top_logprobs;
  std::string error;            // why it FAILED ("" otherwise)
  ErrorCode error_code = ErrorCode::kOk;
  RequestStatus status = RequestStatus::kPending;
  generation::FinishReason finish_reason = generation::FinishReason::kNone;
  double created_time = 0;  // seconds since the epoch, when the request was added
  // (first scheduled, final) in seconds since the epoch; -1 while not reached.
  std::pair<double, double> lifespan{-1.0, -1.0};
  std::vector<double> timestamps;  // when each generated token was produced (record_timestamps)
  std::string text;  // decoded text shown so far, when the manager has a tokenizer
  // Speculative decoding (prompt_lookup_num_tokens): tokens drafted and verified,
  // and how many of them the model accepted (each also counts in generated_tokens).
  int64_t drafted_tokens = 0, accepted_draft_tokens = 0;

  bool is_final() const { return status == RequestStatus::kFinished || status == RequestStatus::kFailed; }
  bool cancelled() const { return finish_reason == generation::FinishReason::kCancelled; }
};

}  // namespace loom::batching
