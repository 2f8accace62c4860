// One request, start to finish, on a contiguous KV cache: prefill the prompt,
// then decode token by token, streaming each token (and its text, when a
// decoder is given) to a callback.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/graph/kv_format.h"
#include "loom/batching/model_runner.h"
#include "loom/batching/text_stream.h"
#include "loom/core/dtype.h"
#include "loom/generation/sampling.h"
#include "loom/generation/stopping.h"
#include "loom/structured/constraint.h"

namespace loom::batching {

struct GenerateOptions {
  int64_t max_new_tokens = 20;
  generation::SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<int32_t> eos_token_ids;
  std::vector<std::string> stop_strings;  // need a TextStream
  // Log-probability of each token under the raw distribution (GenerateResult::logprobs,
  // TokenEvent::logprob): a pass over the vocabulary per token. Off: empty / 0.
  bool logprobs = true;
  DType kv_cache_dtype = DType::kF32;  // K and V type (see ContinuousBatchingConfig::kv_cache_dtype)
  // K and V types and rotation each (graph/kv_format.h); when set, kv_cache_dtype is ignored.
  std::optional<graph::KvFormat> kv_format;
  // Output constrained to a grammar (RequestOptions::constraint): masked logits,
  // EOS only where the output is complete, finish "stop" when nothing may follow.
  std::shared_ptr<structured::Constraint> constraint;
  // Speculative decoding by prompt lookup: up to this many drafted tokens verified
  // per step (adapted as in batching/draft_length.h); 0: off. Same tokens either way.
  int64_t prompt_lookup_num_tokens = 0;
};

struct TokenEvent {
  int32_t id;
  float logprob;
  std::string text;  // newly final text (may be empty)
};

struct GenerateTimings {
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t prompt_tokens = 0;
  int64_t decode_steps = 0;  // tokens produced by decode steps (all but the first)
  int64_t drafted_tokens = 0, accepted_draft_tokens = 0;  // prompt lookup: verified, accepted
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> generated_ids;
  std::vector<float> logprobs;
  std::string text;
  generation::FinishReason finish_reason = generation::FinishReason::kNone;
  GenerateTimings timings;
};

Result<GenerateResult> generate(ModelRunner& runner, const std::vector<int32_t>& prompt_ids, const GenerateOptions& options,
                                TextStream* text = nullptr,
                                const std::function<void(const TokenEvent&)>& on_token = nullptr);

}  // namespace loom::batching
