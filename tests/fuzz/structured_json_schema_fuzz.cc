// A JSON Schema from the fuzzer, strict and lax: json_schema_to_grammar must accept
// it or name what is wrong; an accepted schema's GBNF must parse back, and its masks
// must equal the brute-force reference along a short walk.
#include "fuzz_util.h"
#include "loom/structured/grammar.h"
#include "loom/structured/json_schema_to_grammar.h"
#include "structured_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  const std::string_view text = loom::fuzz::as_text(data, size);
  for (bool strict : {true, false}) {
    auto gbnf = loom::structured::json_schema_to_gbnf(text, strict);
    if (!gbnf.ok()) {
      if (gbnf.status().message().empty()) std::abort();
      continue;
    }
    auto g = loom::structured::parse_gbnf(*gbnf);
    if (!g.ok()) std::abort();  // the compiler emitted GBNF its own parser refuses
    loom::fuzz::check_masks(std::move(*g), text);
  }
  return 0;
}
