// Prompt lookup (n-gram) drafting for speculative decoding: guesses the next
// tokens of a sequence from its own past — the prompt and what it generated so
// far — without a second model. The last n tokens (n from max_ngram down to 1)
// are searched for, most recent occurrence first, and the tokens that followed
// that occurrence are the draft; when the occurrence is so recent that fewer
// than max_tokens follow it, the text is taken to repeat with that period (a
// loop drafts its next turn). Quoting, code edits, summaries and loops repeat;
// other text finds no match and drafts nothing.
//
// Transformers' prompt_lookup_num_tokens does the same with the first (oldest)
// match; the most recent one follows the text being copied now, and a
// sequence repeating itself matches its latest period.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::batching {

// The longest n-gram tried. A longer match is likelier to go on the same way;
// shorter ones are tried only when it finds none (Transformers' default is 2).
inline constexpr int64_t kPromptLookupMaxNgram = 3;

// Appends to `draft` (cleared first) up to `max_tokens` tokens guessed to follow
// tokens[0, n); returns how many. None when no suffix of 1..max_ngram tokens
// occurred before.
int64_t prompt_lookup_draft(const int32_t* tokens, int64_t n, int64_t max_tokens, std::vector<int32_t>& draft,
                            int64_t max_ngram = kPromptLookupMaxNgram);

}  // namespace loom::batching
