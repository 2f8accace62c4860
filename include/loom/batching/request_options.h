// Per-request settings of ContinuousBatchingManager::add_request: upstream's
// arguments (request_id, max_new_tokens, streaming, record_timestamps,
// eos_token_id, logit-processor kwargs) plus loom's per-request sampling, seed
// and stop strings. Unset fields take the manager's GenerationConfig.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace loom::structured {
class Constraint;
}

namespace loom::batching {

// A reasoning model's thinking budget: once `after_tokens` tokens were generated
// while the thinking section is open (the prompt left it open, or the text so far
// holds `open`) and not yet closed (no `close` after it), the next tokens are forced
// to be `close_ids`, so the answer follows. Such a request drafts no tokens.
struct ThinkingBudget {
  int64_t after_tokens = 0;
  std::string open, close;  // the section's tags as text, e.g. "<think>", "</think>"
  bool open_at_start = false;
  std::vector<int32_t> close_ids;  // what is forced (the close tag and what follows it)
};

struct RequestOptions {
  std::optional<std::string> request_id;  // generated ("req_<n>") when unset; must be unique among live requests
  std::optional<int64_t> max_new_tokens;
  bool streaming = false;          // an output per generated token, not only the final one
  bool record_timestamps = false;  // a timestamp per generated token
  std::optional<std::vector<int32_t>> eos_token_ids;

  // Logit processors: honoured with per_request_processors, else dropped or rejected
  // (drop_unsupported_processors).
  std::optional<bool> do_sample;
  std::optional<float> temperature;
  std::optional<int32_t> top_k;
  std::optional<float> top_p;
  std::optional<float> min_p;
  std::optional<float> repetition_penalty;
  std::optional<float> presence_penalty;   // OpenAI's, over generated tokens
  std::optional<float> frequency_penalty;  // OpenAI's, over generated tokens
  std::vector<std::pair<int32_t, float>> logit_bias;  // OpenAI's: token id → bias added to its logit

  // The request's own RNG seed: its samples do not depend on its batch mates.
  std::optional<uint64_t> seed;
  // Added to the GenerationConfig's; need a tokenizer (ManagerOptions::text_stream).
  std::vector<std::string> stop_strings;

  // Sequences sampled from this prompt (GenerationConfig's num_return_sequences
  // when unset). The prompt is computed once; after it, sequence k > 0 forks
  // with id "<request_id>#<k>", shares the prompt's full KV blocks (the partial
  // last one is copied) and samples with its own RNG (seed derived from the
  // request's seed and k). Needs sampling: greedy would give N equal sequences.
  std::optional<int32_t> num_return_sequences;

  // Log-probabilities (of the raw distribution) for this request whatever
  // ContinuousBatchingConfig::return_logprobs says: the sampled token's, and with
  // top_logprobs > 0 the most likely alternatives at each generated position.
  bool logprobs = false;
  int32_t top_logprobs = 0;
  // Log-probabilities of the prompt's tokens (each under the positions before
  // it; none for the first), with this many alternatives each (0: only the
  // prompt token's). Such a request computes its whole prompt: no prefix-cache hits.
  std::optional<int32_t> prompt_logprobs;

  // Output constrained to a grammar (structured::ConstraintRegistry compiles and
  // shares them): each step's logits are masked to the tokens it allows, EOS only
  // where the output is complete. Its vocabulary must be the model's tokenizer's.
  std::shared_ptr<structured::Constraint> constraint;

  // Closes the thinking section when its budget is spent (needs a tokenizer).
  std::optional<ThinkingBudget> thinking_budget;

  // Speculative decoding by prompt lookup (GenerationConfig::prompt_lookup_num_tokens
  // when unset): at most this many drafted tokens verified per step; 0 turns it off.
  // The tokens are the same either way.
  std::optional<int64_t> prompt_lookup_num_tokens;

  // With max_queue_size reached: wait this long for room (seconds), else fail at once.
  std::optional<double> queue_timeout;

  bool has_processor_args() const {
    return do_sample || temperature || top_k || top_p || min_p || repetition_penalty || presence_penalty ||
           frequency_penalty || !logit_bias.empty();
  }
};

}  // namespace loom::batching
