// A regular expression from the fuzzer: regex_to_grammar must accept it or name what
// is wrong, and an accepted one's masks must equal the brute-force reference.
#include "fuzz_util.h"
#include "loom/structured/regex_to_grammar.h"
#include "structured_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 1024) return 0;
  const std::string_view text = loom::fuzz::as_text(data, size);
  auto g = loom::structured::regex_to_grammar(text);
  if (!g.ok()) {
    if (g.status().message().empty()) std::abort();
    return 0;
  }
  loom::fuzz::check_masks(std::move(*g), text);
  return 0;
}
