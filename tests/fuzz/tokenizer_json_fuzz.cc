// tokenizer.json and a text from the fuzzer, split at the first NUL byte (no NUL:
// a fixed text): loading must succeed or name what is wrong; an accepted
// tokenizer must encode the text (or reject invalid UTF-8) and decode what it
// encoded.
#include "fuzz_util.h"
#include "loom/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = loom::fuzz::as_text(data, size);
  const size_t split = input.find('\0');
  const std::string_view json = input.substr(0, split);
  const std::string_view text =
      split == std::string_view::npos ? std::string_view("Hello world! <s> 12 ab c\n\tnaïve 東京") : input.substr(split + 1);
  auto tok = loom::Tokenizer::from_json_string(json);
  if (!tok.ok()) return 0;
  for (bool special : {true, false}) {
    auto enc = (*tok)->encode(text, special);
    if (!enc.ok()) continue;
    (void)(*tok)->decode(enc->ids, /*skip_special_tokens=*/false);
    (void)(*tok)->decode(enc->ids, /*skip_special_tokens=*/true);
  }
  return 0;
}
