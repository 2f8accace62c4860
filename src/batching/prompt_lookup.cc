#include "loom/batching/prompt_lookup.h"

#include <algorithm>

namespace loom::batching {

int64_t prompt_lookup_draft(const int32_t* tokens, int64_t n, int64_t max_tokens, std::vector<int32_t>& draft,
                            int64_t max_ngram) {
  draft.clear();
  if (max_tokens <= 0 || n < 2) return 0;
  for (int64_t len = std::min(max_ngram, n - 1); len >= 1; --len) {
    const int32_t* suffix = tokens + n - len;
    // An occurrence ending at `end` (exclusive) is followed by tokens[end, n);
    // the suffix itself (end == n) has nothing after it.
    for (int64_t end = n - 1; end >= len; --end) {
      if (tokens[end - 1] != suffix[len - 1] || !std::equal(suffix, suffix + len, tokens + end - len)) continue;
      const int64_t period = n - end;
      for (int64_t i = 0; i < max_tokens; ++i) {
        int64_t j = end + i;
        while (j >= n) j -= period;
        draft.push_back(tokens[j]);
      }
      return max_tokens;
    }
  }
  return 0;
}

}  // namespace loom::batching
