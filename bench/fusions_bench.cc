// One built-in fusion on against off, in one process: the model loaded twice (the
// checkpoint's own modules, and with the fusion's KernelConfig), then, round after round,
// one greedy request on each (the order swapped every round), prefill and decode timed
// by generate(). On a shared machine whose speed moves from second to second, the two
// runs of a round see nearly the same machine, so the median over rounds of their ratio
// is what the fusion changes; the best of each is printed too. A process that other
// processes keep off its cores loses wall time but not CPU time, so the same ratios are
// also given in CPU time (the process's, all threads; a prefill-only request gives the
// prefill's share).
//
//   build/bench/fusions_bench --model models/loom-kjv-tiny --fusion all --threads 1 --rounds 30
//
// Fusions: qkv ("Attention": loom:FusedQKV), gate_up ("MLP": loom:FusedGateUpMLP),
// add_norm (loom:AddRMSNorm after each self_attn), all (the three: loom's default).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/core/thread_pool.h"
#include "loom/models/builtin_fusions.h"
#include "loom/models/model.h"

namespace {

using namespace loom;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: fusions_bench --model DIR|FILE [--fusion qkv|gate_up|add_norm|all] [--threads N] [--rounds N] "
               "[--prompt-tokens N] [--decode-tokens N]\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir, fusion = "all";
  int threads = 1, rounds = 20;
  int64_t prompt_tokens = 32, decode_tokens = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--model") model_dir = v;
    else if (a == "--fusion") fusion = v;
    else if (a == "--threads") threads = std::atoi(v);
    else if (a == "--rounds") rounds = std::atoi(v);
    else if (a == "--prompt-tokens") prompt_tokens = std::atoll(v);
    else if (a == "--decode-tokens") decode_tokens = std::atoll(v);
    else usage(("unknown flag " + a).c_str());
  }
  if (model_dir.empty()) usage("--model is required");
  const std::map<std::string, models::BuiltinFusions> fusions = {
      {"qkv", {true, false, false}}, {"gate_up", {false, true, false}}, {"add_norm", {false, false, true}}, {"all", {}}};
  if (!fusions.count(fusion)) usage(("unknown fusion " + fusion).c_str());

  auto plain = models::Model::load(model_dir);
  if (!plain.ok()) usage(plain.status().to_string().c_str());
  models::LoadOptions o;
  o.kernel_config = models::builtin_fusion_config((*plain)->module(), fusions.at(fusion));
  if (o.kernel_config.empty()) usage(("fusion " + fusion + " does not fit this model").c_str());
  auto fused = models::Model::load(model_dir, o);
  if (!fused.ok()) usage(fused.status().to_string().c_str());

  ThreadPool pool(threads);
  auto plain_runner = batching::ModelRunner::create(*plain, "cpu", &pool).value();
  auto fused_runner = batching::ModelRunner::create(*fused, "cpu", &pool).value();
  const int64_t vocab = (*plain)->config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
  for (int64_t i = 0; i < prompt_tokens; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + 13) % vocab);
  batching::GenerateOptions g;
  g.max_new_tokens = decode_tokens + 1;  // the first token comes from the prefill
  g.logprobs = false;

  struct Speed {
    double prefill, decode;          // tok/s, wall
    double cpu_prefill, cpu_decode;  // tok per CPU second
  };
  auto cpu_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  batching::GenerateOptions prefill_only = g;
  prefill_only.max_new_tokens = 1;
  auto run = [&](batching::ModelRunner& r) {
    const double c0 = cpu_seconds();
    (void)batching::generate(r, prompt, prefill_only).value();
    const double c1 = cpu_seconds();
    const batching::GenerateResult res = batching::generate(r, prompt, g).value();
    const double c2 = cpu_seconds();
    const double prefill_cpu = c1 - c0, decode_cpu = (c2 - c1) - prefill_cpu;
    return std::make_pair(Speed{res.timings.prompt_tokens / res.timings.prefill_seconds,
                                res.timings.decode_steps / res.timings.decode_seconds,
                                static_cast<double>(prompt_tokens) / prefill_cpu,
                                static_cast<double>(res.timings.decode_steps) / std::max(decode_cpu, 1e-9)},
                          res.generated_ids);
  };
  const auto warm_plain = run(*plain_runner), warm_fused = run(*fused_runner);
  if (warm_plain.second != warm_fused.second) {
    std::fprintf(stderr, "fused and unfused greedy tokens differ\n");
    return 1;
  }
  std::vector<double> prefill_ratio, decode_ratio, cpu_prefill_ratio, cpu_decode_ratio;
  Speed best_plain{0, 0, 0, 0}, best_fused{0, 0, 0, 0};
  for (int r = 0; r < rounds; ++r) {
    Speed p, f;
    if (r % 2 == 0) {
      p = run(*plain_runner).first;
      f = run(*fused_runner).first;
    } else {
      f = run(*fused_runner).first;
      p = run(*plain_runner).first;
    }
    prefill_ratio.push_back(f.prefill / p.prefill);
    decode_ratio.push_back(f.decode / p.decode);
    cpu_prefill_ratio.push_back(f.cpu_prefill / p.cpu_prefill);
    cpu_decode_ratio.push_back(f.cpu_decode / p.cpu_decode);
    best_plain = {std::max(best_plain.prefill, p.prefill), std::max(best_plain.decode, p.decode), 0, 0};
    best_fused = {std::max(best_fused.prefill, f.prefill), std::max(best_fused.decode, f.decode), 0, 0};
  }
  // model | threads | fusion | prefill tok/s off | on | median × | CPU median × | decode tok/s off | on | median × | CPU median ×
  const size_t slash = model_dir.find_last_of('/', model_dir.size() > 1 ? model_dir.size() - 2 : 0);
  const std::string name = slash == std::string::npos ? model_dir : model_dir.substr(slash + 1);
  std::printf("| %s | %d | %s | %.1f | %.1f | %.3f | %.3f | %.2f | %.2f | %.3f | %.3f |\n", name.c_str(), threads,
              fusion.c_str(), best_plain.prefill, best_fused.prefill, median(prefill_ratio), median(cpu_prefill_ratio),
              best_plain.decode, best_fused.decode, median(decode_ratio), median(cpu_decode_ratio));
  return 0;
}
