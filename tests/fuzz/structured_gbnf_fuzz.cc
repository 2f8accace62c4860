// GBNF text from the fuzzer: parse_gbnf must accept it or name what is wrong, and an
// accepted grammar's masks must equal the brute-force reference along a short walk.
#include "fuzz_util.h"
#include "loom/structured/grammar.h"
#include "structured_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;  // longer inputs add nothing but time
  const std::string_view text = loom::fuzz::as_text(data, size);
  auto g = loom::structured::parse_gbnf(text);
  if (!g.ok()) {
    if (g.status().message().empty()) std::abort();
    return 0;
  }
  loom::fuzz::check_masks(std::move(*g), text);
  return 0;
}
