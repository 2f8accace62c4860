// One `loom batch` input line from the fuzzer: parsing must give a request or an
// error naming the line and field, with a tokenizer for text prompts.
#include "fuzz_util.h"
#include "loom/batching/batch_input_line.h"
#include "loom/tokenizer/tokenizer.h"

namespace {

const loom::Tokenizer& tokenizer() {
  static const auto tok = loom::Tokenizer::from_json_string(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [{"id": 5, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                      "normalized": false, "special": true}],
    "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [{"Sequence": {"id": "A", "type_id": 0}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [5], "tokens": ["<s>"]}}},
    "decoder": null,
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "c": 3, "<unk>": 4, "<s>": 5},
              "merges": ["a b"], "unk_token": "<unk>"}
  })").value();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view line = loom::fuzz::as_text(data, size);
  (void)loom::batching::parse_batch_input_line(line, 1, &tokenizer(), /*add_special_tokens=*/true);
  (void)loom::batching::parse_batch_input_line(line, 2, nullptr, /*add_special_tokens=*/false);
  return 0;
}
