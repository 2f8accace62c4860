// `loom bench`: prefill and decode throughput of one request (batch 1) on random
// prompt ids, printed as a table.
#include <chrono>
#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/common.h"
#include "loom/batching/model_runner.h"
#include "loom/generation/sampling.h"
#include "loom/runtime/cpu/cpu_features.h"

namespace loom::cli {

namespace {
struct BenchFlags {
  ModelOptions model;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 128;
  int repeats = 1;
};

void run_bench(const BenchFlags& f) {
  using Clock = std::chrono::steady_clock;
  const std::string dir = resolve_model_dir(f.model).value();
  apply_threads(f.model);
  auto t_load = Clock::now();
  auto model = load_model(dir, f.model).value();
  auto runner = batching::ModelRunner::create(model, f.model.backend).value();
  const double load_s = std::chrono::duration<double>(Clock::now() - t_load).count();
  const int64_t vocab = model->vocab_size();
  generation::Rng rng(1234);
  std::vector<int32_t> prompt(static_cast<size_t>(f.prompt_tokens));
  for (auto& id : prompt) id = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));

  double best_prefill = 0, best_decode = 0;
  for (int rep = 0; rep < f.repeats; ++rep) {
    runtime::ContiguousKvCache cache(runner->kv_layout(), 1, f.prompt_tokens + f.decode_tokens + 1);
    auto t0 = Clock::now();
    Tensor logits = runner->step({{prompt.data(), f.prompt_tokens, 0}}, cache).value();
    const double prefill_s = std::chrono::duration<double>(Clock::now() - t0).count();
    int32_t next = 0;
    {
      const float* l = logits.data_as<float>();
      for (int64_t i = 1; i < vocab; ++i) if (l[i] > l[next]) next = static_cast<int32_t>(i);
    }
    auto t1 = Clock::now();
    for (int64_t i = 0; i < f.decode_tokens; ++i) {
      Tensor out = runner->step({{&next, 1, f.prompt_tokens + i}}, cache).value();
      const float* l = out.data_as<float>();
      int32_t best = 0;
      for (int64_t j = 1; j < vocab; ++j) if (l[j] > l[best]) best = static_cast<int32_t>(j);
      next = best;
    }
    const double decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
    best_prefill = std::max(best_prefill, f.prompt_tokens / prefill_s);
    best_decode = std::max(best_decode, f.decode_tokens / decode_s);
  }
  std::map<DType, int64_t> per = model->checkpoint().parameters_per_dtype();
  std::string dtypes;
  for (const auto& [dt, n] : per) dtypes += (dtypes.empty() ? "" : "+") + std::string(dtype_name(dt));
  std::printf("| model | dtype | params | threads | isa | backend | prefill tok/s (%lld) | decode tok/s (%lld) | load s |\n",
              static_cast<long long>(f.prompt_tokens), static_cast<long long>(f.decode_tokens));
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  std::printf("| %s | %s | %.3gB | %d | %s | %s | %.1f | %.2f | %.2f |\n", model->module().class_name().c_str(),
              dtypes.c_str(), model->checkpoint().parameter_count() / 1e9, runner->pool().num_threads(),
              cpu::isa_name().c_str(), runner->backend_name().c_str(), best_prefill, best_decode, load_s);
}
}  // namespace

void add_bench_command(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  auto* cmd = app.add_subcommand("bench", "Measure prefill and decode tokens/s at batch 1");
  add_model_options(cmd, &f->model);
  cmd->add_option("--prompt-tokens", f->prompt_tokens, "Prompt length for prefill")->check(CLI::PositiveNumber);
  cmd->add_option("--decode-tokens", f->decode_tokens, "Tokens decoded after the prompt")->check(CLI::PositiveNumber);
  cmd->add_option("--repeats", f->repeats, "Runs; the best is reported")->check(CLI::PositiveNumber);
  cmd->callback([f] { run_bench(*f); });
}

}  // namespace loom::cli
