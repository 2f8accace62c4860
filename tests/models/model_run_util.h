// Shared by the models tests that compare two loads of one fixture (kernels,
// layouts, plugins): the fixture's prompt, its logits over a prefill and three
// decode steps, and its greedy continuation.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom/runtime/kv_cache_contiguous.h"
#include "models/models_test_util.h"

namespace loom::models_test {

// The fixture's directory; a clear error when scripts/make-fixtures has not made it.
inline std::filesystem::path existing_fixture(const std::string& name) {
  const std::filesystem::path p = fixture(name);
  if (!std::filesystem::exists(p / "config.json"))
    throw Error(not_found("missing fixture " + p.string() + ": run scripts/make-fixtures " + fixtures_dir().string()));
  return p;
}

inline std::vector<int32_t> prompt_of(const std::string& name) {
  std::ifstream in(existing_fixture(name) / "reference.json");
  return nlohmann::json::parse(in)["prompt_ids"].get<std::vector<int32_t>>();
}

// Every token's logits for the prompt but its last three (one prefill), then
// the logits of three decode steps over those.
inline std::vector<float> logits_of(const std::shared_ptr<models::Model>& model, const std::vector<int32_t>& prompt) {
  auto runner = batching::ModelRunner::create(model, "cpu").value();
  runtime::ContiguousKvCache cache(runner->kv_layout(), 1, static_cast<int64_t>(prompt.size()) + 8);
  const int64_t n = static_cast<int64_t>(prompt.size()) - 3;
  std::vector<float> out =
      runner->step({{prompt.data(), n, 0}}, cache, batching::LogitsRows::kAllTokens).value().to_f32_vector();
  for (int64_t i = n; i < n + 3; ++i) {
    const std::vector<float> l = runner->step({{prompt.data() + i, 1, i}}, cache).value().to_f32_vector();
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

inline std::vector<int32_t> greedy_of(const std::shared_ptr<models::Model>& model, const std::vector<int32_t>& prompt,
                                      int64_t new_tokens = 16) {
  auto runner = batching::ModelRunner::create(model, "cpu").value();
  batching::GenerateOptions o;
  o.max_new_tokens = new_tokens;
  return batching::generate(*runner, prompt, o).value().generated_ids;
}

// How far `got` is from `want`: the largest absolute difference and the
// normalised squared error (Σ(got − want)² / Σ want²).
struct LogitsDiff {
  double max_abs = 0;
  double nmse = 0;
};

inline LogitsDiff logits_diff(const std::vector<float>& got, const std::vector<float>& want) {
  LogitsDiff r;
  double err = 0, energy = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    r.max_abs = std::max(r.max_abs, std::fabs(d));
    err += d * d;
    energy += static_cast<double>(want[i]) * want[i];
  }
  r.nmse = energy > 0 ? err / energy : err;
  return r;
}

// Holds `got` to `want` for fixture `name`: max |Δ| ≤ f32_max_abs for an f32
// fixture, NMSE ≤ 1e-4 for the others (bf16 weights round differently per
// summation order). `what` names the comparison in failure messages.
inline LogitsDiff expect_logits_close(const std::vector<float>& got, const std::vector<float>& want,
                                      const std::string& name, const std::string& what, double f32_max_abs) {
  EXPECT_EQ(got.size(), want.size()) << name << " " << what;
  const LogitsDiff d = logits_diff(got, want);
  if (name.find("-f32") != std::string::npos)
    EXPECT_LE(d.max_abs, f32_max_abs) << name << " " << what << ": max |Δ| over all logits";
  else
    EXPECT_LE(d.nmse, 1e-4) << name << " " << what << ": NMSE of logits";
  return d;
}

}  // namespace loom::models_test
