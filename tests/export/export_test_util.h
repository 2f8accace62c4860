// Shared by the exporter tests: the parity fixtures (scripts/make-fixtures, run
// by ctest), loading one (optionally with a KernelConfig), and random prompts.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/models/model.h"
#include "models/models_test_util.h"

namespace loom::export_test {

// Where the parity fixtures are and which variants they hold: the models tests' helpers.
using models_test::fixture;
using models_test::fixtures_dir;
using models_test::variant_names;

inline std::shared_ptr<const models::Model> load(const std::string& name, const models::LoadOptions& options = {}) {
  return models::Model::load(fixture(name).string(), options).value();
}

// The kernels every exporter must lower: a fused qkv projection and the RMSNorm+MLP fusion.
inline models::LoadOptions fused_kernels() {
  models::LoadOptions lo;
  lo.kernel_config = kernels::KernelConfig::parse(
                         R"({"Attention": "loom:FusedQKV", "fusions": [[[["RMSNorm", "model.layers.*.post_attention_layernorm"], )"
                         R"(["MLP", "model.layers.*.mlp"]], "loom:RMSNormMLP"]]})")
                         .value();
  return lo;
}

// loom's built-in fusions (models/builtin_fusions.h): merged q/k/v, gate_up + SiLU, add + RMSNorm.
inline models::LoadOptions builtin_fusions() {
  models::LoadOptions lo;
  lo.builtin_fusions = true;
  return lo;
}

// Ids in [3, vocab) (no special tokens of the fixtures).
inline std::vector<int32_t> random_tokens(const models::Model& m, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(3 + rng() % static_cast<uint32_t>(m.vocab_size() - 3)));
  return t;
}

}  // namespace loom::export_test
