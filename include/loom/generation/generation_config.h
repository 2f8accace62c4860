// Transformers' GenerationConfig, typed, with its defaults for the options loom
// implements. generation/ uses only core, so generation_config.json is read with
// io's typed reader in loom/batching/generation_config_file.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/generation/sampling.h"

namespace loom {

// Beyond this many drafted tokens a verification step costs more than it can save.
inline constexpr int64_t kMaxPromptLookupTokens = 128;

struct GenerationConfig {
  std::string source = "defaults";  // where it was read from, for messages

  // Length, as in Transformers: when max_new_tokens is unset, max_length (20 by
  // default) bounds prompt + generated tokens, so a 15-token prompt gets 5 new
  // tokens and a prompt of 20 or more gets none. Setting max_new_tokens
  // overrides max_length. Use new_token_budget() rather than reading either.
  std::optional<int64_t> max_new_tokens;
  int64_t max_length = 20;

  bool do_sample = false;
  double temperature = 1.0;
  int64_t top_k = 50;  // 0 disables
  double top_p = 1.0;
  std::optional<double> min_p;
  double repetition_penalty = 1.0;
  int64_t num_return_sequences = 1;

  std::vector<int64_t> eos_token_ids;  // int or list in the file
  std::optional<int64_t> bos_token_id;
  std::optional<int64_t> pad_token_id;
  std::vector<std::string> stop_strings;  // string or list in the file

  // loom extension: seeds the sampler so a request is reproducible.
  std::optional<uint64_t> seed;

  // Speculative decoding by prompt lookup (batching/prompt_lookup.h): draft up to
  // this many tokens per step from the sequence's own n-grams and verify them in
  // the same forward. Unset or 0: off. The output is the same either way.
  std::optional<int64_t> prompt_lookup_num_tokens;

  // kInvalidArgument naming the field: temperature >= 0, top_k >= 0,
  // 0 < top_p <= 1, 0 <= min_p <= 1, repetition_penalty > 0,
  // max_new_tokens > 0, max_length > 0, num_return_sequences >= 1,
  // eos/bos ids >= 0, 0 <= prompt_lookup_num_tokens <= 128 (a negative pad id, seen in old Llama exports, is
  // allowed as Transformers only warns), no empty stop string.
  Status validate() const;

  // The sampling settings this config gives a request (do_sample, temperature,
  // top_k, top_p, min_p, repetition_penalty); the one place they are converted.
  generation::SamplingParams sampling() const;

  // How many tokens may be generated after a prompt of `prompt_length` tokens.
  int64_t new_token_budget(int64_t prompt_length) const;

  // Fills eos/bos/pad from the model's config.json where this config leaves
  // them unset (what Transformers does when generation_config.json lacks them).
  void inherit_special_tokens(const std::vector<int64_t>& eos, std::optional<int64_t> bos,
                              std::optional<int64_t> pad);
};

}  // namespace loom
