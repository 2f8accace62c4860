// End-to-end parity: every fixture variant (tiny random checkpoints of each
// architecture, written with the PyTorch reference in tests/reference/) must give
// the reference's logits and greedy tokens when run by loom.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using models_test::variant_names;
using models_test::fixtures_dir;

nlohmann::json load_reference(const std::string& variant) {
  std::ifstream in(fixtures_dir() / variant / "reference.json");
  if (!in) throw Error(not_found("missing " + (fixtures_dir() / variant / "reference.json").string()));
  return nlohmann::json::parse(in);
}

TEST(Fixtures, Exist) {
  ASSERT_FALSE(variant_names().empty()) << "no fixtures in " << fixtures_dir()
                                        << ": run scripts/make-fixtures " << fixtures_dir() << " (ctest does it)";
}

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, LogitsAndGreedyTokensMatchPyTorch) {
  const std::string name = GetParam();
  const nlohmann::json ref = load_reference(name);
  auto model = models::Model::load((fixtures_dir() / name).string()).value();
  auto runner = batching::ModelRunner::create(model, "cpu").value();
  const auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto expected = ref["logits"].get<std::vector<double>>();
  const int64_t vocab = model->vocab_size();
  ASSERT_EQ(expected.size(), prompt.size() * static_cast<size_t>(vocab));

  runtime::ContiguousKvCache cache(runner->kv_layout(), 1, static_cast<int64_t>(prompt.size()) + 8);
  Tensor logits = runner->step({{prompt.data(), static_cast<int64_t>(prompt.size()), 0}}, cache,
                               batching::LogitsRows::kAllTokens).value();
  ASSERT_EQ(logits.numel(), static_cast<int64_t>(expected.size()));
  const float* got = logits.data_as<float>();
  double max_abs = 0, err = 0, energy = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const double d = got[i] - expected[i];
    max_abs = std::max(max_abs, std::fabs(d));
    err += d * d;
    energy += expected[i] * expected[i];
  }
  const double nmse = err / energy;
  const bool f32 = ref["checkpoint_dtype"] == "float32";
  if (f32) EXPECT_LE(max_abs, 1e-4) << name << ": max |loom - torch| over all logits";
  else EXPECT_LE(nmse, 1e-4) << name << ": NMSE of logits";
  RecordProperty("max_abs_diff", std::to_string(max_abs));
  RecordProperty("nmse", std::to_string(nmse));

  batching::GenerateOptions o;
  o.max_new_tokens = ref["greedy_new_tokens"].get<int64_t>();
  // loom decodes with a KV cache, so it matches the reference's cached greedy
  // run (the two differ only for dynamic RoPE, whose frequencies change with length).
  const auto want = ref["greedy_ids_cached"].get<std::vector<int32_t>>();
  auto r = batching::generate(*runner, prompt, o).value();
  // bf16 weights are widened exactly and both sides compute in f32, so tokens
  // must agree for bf16 checkpoints too.
  EXPECT_EQ(r.generated_ids, want) << name << ": greedy continuation differs from PyTorch";
}

TEST_P(Parity, ReferenceBackendAgreesWithCpuBackend) {
  const std::string name = GetParam();
  const nlohmann::json ref = load_reference(name);
  auto model = models::Model::load((fixtures_dir() / name).string()).value();
  auto cpu = batching::ModelRunner::create(model, "cpu").value();
  auto scalar = batching::ModelRunner::create(model, "reference").value();
  auto prompt = ref["prompt_ids"].get<std::vector<int32_t>>();
  prompt.resize(24);
  runtime::ContiguousKvCache c1(cpu->kv_layout(), 1, 32), c2(cpu->kv_layout(), 1, 32);
  // Prefill in two chunks, then decode: exercises the cache path of both backends.
  std::vector<float> a, b;
  for (auto* pair : {&a, &b}) {
    auto& runner = pair == &a ? *cpu : *scalar;
    auto& cache = pair == &a ? c1 : c2;
    runner.step({{prompt.data(), 16, 0}}, cache).value();
    Tensor l = runner.step({{prompt.data() + 16, 8, 16}}, cache).value();
    *pair = l.to_f32_vector();
  }
  ASSERT_EQ(a.size(), b.size());
  double max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) max_abs = std::max(max_abs, double(std::fabs(a[i] - b[i])));
  EXPECT_LE(max_abs, 1e-4) << name;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity, ::testing::ValuesIn(variant_names()),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (auto& ch : s) if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Parity);

}  // namespace
}  // namespace loom
