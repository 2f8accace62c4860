// `loom batch` input lines: numbers that do not fit their field's type are errors
// naming the line, the field and the value (reading them was undefined behaviour,
// found under UBSan: tests/fuzz/regressions/batching_batch_input_line/).
#include <gtest/gtest.h>

#include "loom/batching/batch_input_line.h"

namespace loom::batching {
namespace {

std::string error_of(const std::string& line) {
  auto r = parse_batch_input_line(line, 3, nullptr, true);
  EXPECT_FALSE(r.ok()) << line;
  return r.ok() ? std::string() : r.status().message();
}

TEST(BatchInputLine, ReadsEveryField) {
  auto r = parse_batch_input_line(
      R"({"id": 7, "prompt_ids": [1, 2], "max_new_tokens": 16.0, "temperature": 0.5, "top_k": 40, "top_p": 0.9,)"
      R"( "min_p": 0.1, "repetition_penalty": 1.1, "seed": 18446744073709551615, "stop": ["x"], "num_return_sequences": 2})",
      1, nullptr, true);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->input_ids, (std::vector<int32_t>{1, 2}));
  const RequestOptions& o = r->options;
  EXPECT_EQ(o.request_id, "7");
  EXPECT_EQ(o.max_new_tokens, 16);
  EXPECT_EQ(o.temperature, 0.5f);
  EXPECT_EQ(o.top_k, 40);
  EXPECT_EQ(o.top_p, 0.9f);
  EXPECT_EQ(o.min_p, 0.1f);
  EXPECT_EQ(o.repetition_penalty, 1.1f);
  EXPECT_EQ(o.seed, UINT64_MAX);
  EXPECT_EQ(o.stop_strings, std::vector<std::string>{"x"});
  EXPECT_EQ(o.num_return_sequences, 2);
  EXPECT_EQ(o.do_sample, true);
}

TEST(BatchInputLine, NumbersOutsideTheirTypeNameTheField) {
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "max_new_tokens": 1e300})"),
            "input line 3: field 'max_new_tokens' must be an integer in [-9223372036854775808, 9223372036854775807], got 1e+300");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "top_k": 1e300})"),
            "input line 3: field 'top_k' must be an integer in [-2147483648, 2147483647], got 1e+300");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "top_k": 2147483648})"),
            "input line 3: field 'top_k' must be an integer in [-2147483648, 2147483647], got 2147483648");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "num_return_sequences": 2.5})"),
            "input line 3: field 'num_return_sequences' must be an integer in [-2147483648, 2147483647], got 2.5");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "temperature": 1e39})"),
            "input line 3: field 'temperature' must be a finite number, got 1e+39");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "top_p": "high"})"),
            "input line 3: field 'top_p' must be a finite number, got \"high\"");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "seed": 1.5e30})"),
            "input line 3: field 'seed' must be a non-negative integer, got 1.5e+30");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "seed": -1})"), "input line 3: field 'seed' must be a non-negative integer, got -1");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1, "2"]})"), "input line 3: field 'prompt_ids' must be a list of token ids, got \"2\"");
  EXPECT_EQ(error_of(R"({"prompt_ids": [1], "stop": 7})"),
            "input line 3: field 'stop' must be a string or a list of strings, got 7");
}

// One rule for every integer field loom reads from JSON: 2.0 is the integer 2.
TEST(BatchInputLine, IntegralFloatsAreIntegers) {
  const BatchInput in = parse_batch_input_line(R"({"prompt_ids": [5.0, 6], "max_new_tokens": 2.0, "seed": 7.0})", 3,
                                               nullptr, false, nullptr)
                            .value();
  EXPECT_EQ(in.input_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(in.options.max_new_tokens, 2);
  EXPECT_EQ(in.options.seed, 7u);
}

TEST(BatchInputLine, TextPromptWithoutTokenizerAsksForIds) {
  EXPECT_EQ(error_of(R"({"prompt": "hi"})"),
            "input line 3: a text prompt needs the model's tokenizer.json (give prompt_ids)");
}

}  // namespace
}  // namespace loom::batching
