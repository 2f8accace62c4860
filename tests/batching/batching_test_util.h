// Shared by the batching tests: the tiny fixture checkpoints, runners on a
// one-thread pool (a busy 2-core machine makes thread hand-offs the slowest part
// of a tiny model's step), and "the same request run alone" via generate().
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/batching/continuous_batching_manager.h"
#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/core/thread_pool.h"
#include "loom/models/model.h"

namespace loom::batching::testing {

inline std::filesystem::path fixtures_dir() {
  if (const char* env = std::getenv("LOOM_FIXTURES_DIR")) return env;
  return std::filesystem::path(LOOM_BINARY_DIR) / "fixtures";
}

inline std::shared_ptr<const models::Model> load_fixture(const std::string& name) {
  const auto dir = fixtures_dir() / name;
  if (!std::filesystem::exists(dir))
    throw Error(not_found("fixture " + dir.string() + " is missing: run scripts/make-fixtures " +
                          fixtures_dir().string() + " (ctest does it)"));
  return models::Model::load(dir.string()).value();
}

inline ThreadPool& one_thread_pool() {
  static ThreadPool pool(1);
  return pool;
}

// "cpu" is the optimized backend, the one users run: its matmuls and attention
// compute each row the same way whatever else is in the step, so a request's
// arithmetic cannot depend on how it was batched or chunked. "reference" is the
// scalar one.
inline std::shared_ptr<ModelRunner> make_runner(const std::shared_ptr<const models::Model>& model,
                                                const std::string& backend = "cpu") {
  return std::shared_ptr<ModelRunner>(ModelRunner::create(model, backend, &one_thread_pool()).value().release());
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> d(3, static_cast<int32_t>(vocab) - 1);  // no bos/eos ids
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Greedy tokens of `prompt` run alone through batching::generate (contiguous cache,
// of `kv_cache_dtype`).
inline std::vector<int32_t> alone(ModelRunner& runner, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                                  std::vector<int32_t> eos = {}, DType kv_cache_dtype = DType::kF32) {
  GenerateOptions o;
  o.max_new_tokens = max_new_tokens;
  o.eos_token_ids = std::move(eos);
  o.kv_cache_dtype = kv_cache_dtype;
  return generate(runner, prompt, o).value().generated_ids;
}

// A generation config that never stops on EOS (fixtures are random models).
inline GenerationConfig no_eos_config() {
  GenerationConfig gc;
  gc.max_new_tokens = 8;
  return gc;
}

}  // namespace loom::batching::testing
