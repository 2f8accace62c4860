// End-to-end parity: every fixture variant (tiny random checkpoints of each
// architecture, written with the PyTorch reference in tests/reference/) must give
// the reference's logits and greedy tokens when run by loom.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom/runtime/cpu/matmul.h"
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

// A fixture variant loaded for the optimized backend, with its reference outputs.
struct Case {
  nlohmann::json ref;
  std::shared_ptr<const models::Model> model;
  std::unique_ptr<batching::ModelRunner> runner;
  std::vector<int32_t> prompt;
  std::vector<double> expected;  // the reference's logits over the whole prompt

  explicit Case(const std::string& name)
      : ref(load_reference(name)),
        model(models::Model::load((fixtures_dir() / name).string()).value()),
        runner(batching::ModelRunner::create(model, "cpu").value()),
        prompt(ref["prompt_ids"].get<std::vector<int32_t>>()),
        expected(ref["logits"].get<std::vector<double>>()) {}

  // Logits of every prompt position, the prompt prefilled in one step.
  Tensor prompt_logits() const {
    runtime::ContiguousKvCache cache(runner->kv_layout(), 1, static_cast<int64_t>(prompt.size()) + 8);
    return runner->step({{prompt.data(), static_cast<int64_t>(prompt.size()), 0}}, cache,
                        batching::LogitsRows::kAllTokens).value();
  }
};

TEST_P(Parity, LogitsAndGreedyTokensMatchPyTorch) {
  const std::string name = GetParam();
  const Case c(name);
  const auto& [ref, model, runner, prompt, expected] = c;
  const int64_t vocab = model->vocab_size();
  ASSERT_EQ(expected.size(), prompt.size() * static_cast<size_t>(vocab));

  // At "highest", bf16 and f16 weights are widened exactly and everything computes in f32,
  // as the reference does: every dtype is held to the f32 bound.
  cpu::ScopedMatmulPrecision highest(cpu::MatmulPrecision::kHighest);
  Tensor logits = c.prompt_logits();
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
  EXPECT_LE(max_abs, 1e-4) << name << ": max |loom - torch| over all logits";
  RecordProperty("max_abs_diff", std::to_string(max_abs));
  RecordProperty("nmse", std::to_string(nmse));

  batching::GenerateOptions o;
  o.max_new_tokens = ref["greedy_new_tokens"].get<int64_t>();
  // loom decodes with a KV cache, so it matches the reference's cached greedy
  // run (the two differ only for dynamic RoPE, whose frequencies change with length).
  const auto want = ref["greedy_ids_cached"].get<std::vector<int32_t>>();
  auto r = batching::generate(*runner, prompt, o).value();
  // bf16 and f16 weights are widened exactly and both sides compute in f32, so tokens
  // must agree for those checkpoints too.
  EXPECT_EQ(r.generated_ids, want) << name << ": greedy continuation differs from PyTorch";
}

// Matmul precision "medium" (runtime/cpu/matmul.h) rounds the activations entering
// bf16-weight linears to bf16 where the CPU has bf16 dot products, as a bf16 model's
// matmuls run upstream, and "auto" (the default) makes the same choice: their logits must
// be at least as close to the f32 PyTorch reference as PyTorch's own bf16 forward is
// (reference.json logits_bf16_compute), and the greedy run keeps the reference's first
// token. F32 and F16 checkpoints are untouched.
TEST_P(Parity, MediumAndAutoMatmulPrecisionStayWithinTheParityBudget) {
  const std::string name = GetParam();
  const Case c(name);
  const auto& [ref, model, runner, prompt, expected] = c;
  auto logits_at = [&](cpu::MatmulPrecision p) {
    cpu::ScopedMatmulPrecision precision(p);
    return c.prompt_logits().to_f32_vector();
  };
  const std::vector<float> highest = logits_at(cpu::MatmulPrecision::kHighest);
  for (const cpu::MatmulPrecision p : {cpu::MatmulPrecision::kMedium, cpu::MatmulPrecision::kAuto}) {
    const std::string what = name + " at " + cpu::matmul_precision_name(p);
    const std::vector<float> rounded = logits_at(p);
    ASSERT_EQ(rounded.size(), expected.size());
    const bool rounds = ref["checkpoint_dtype"] == "bfloat16" && [p] {
      cpu::ScopedMatmulPrecision precision(p);
      return cpu::bf16_dot_products_active();
    }();
    if (!rounds) {
      EXPECT_EQ(0, std::memcmp(highest.data(), rounded.data(), sizeof(float) * rounded.size()))
          << what << ": changed logits without bf16 weights and bf16 dot products";
      continue;
    }
    const auto torch_bf16 = ref["logits_bf16_compute"].get<std::vector<double>>();
    ASSERT_EQ(torch_bf16.size(), expected.size());
    double err = 0, torch_err = 0, energy = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      err += (rounded[i] - expected[i]) * (rounded[i] - expected[i]);
      torch_err += (torch_bf16[i] - expected[i]) * (torch_bf16[i] - expected[i]);
      energy += expected[i] * expected[i];
    }
    EXPECT_LE(err / energy, torch_err / energy)
        << what << ": NMSE of the logits against the f32 reference, bound: PyTorch's bf16 forward";
    RecordProperty("torch_bf16_nmse", std::to_string(torch_err / energy));
    EXPECT_NE(0, std::memcmp(highest.data(), rounded.data(), sizeof(float) * rounded.size()))
        << what << ": did not round the activations";
    RecordProperty(std::string(cpu::matmul_precision_name(p)) + "_nmse", std::to_string(err / energy));
    batching::GenerateOptions o;
    o.max_new_tokens = 1;
    cpu::ScopedMatmulPrecision precision(p);
    const auto r = batching::generate(*runner, prompt, o).value();
    ASSERT_EQ(r.generated_ids.size(), 1u);
    EXPECT_EQ(r.generated_ids[0], ref["greedy_ids_cached"][0].get<int32_t>()) << what << ": first greedy token";
  }
}

TEST_P(Parity, ReferenceBackendAgreesWithCpuBackend) {
  const std::string name = GetParam();
  // The scalar reference backend computes exact f32 products, as "highest" does.
  cpu::ScopedMatmulPrecision highest(cpu::MatmulPrecision::kHighest);
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
