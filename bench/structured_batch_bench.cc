// Structured outputs inside continuous batching: N concurrent requests all
// constrained to one nested JSON schema against the same N unconstrained, greedy,
// on a real checkpoint and tokenizer. Prints generated tok/s of each run (best of
// the rounds; the runs alternate so a busy machine hits both alike), the ratio,
// the time masking costs the batching thread per constrained token (p50/p99: the
// mask lookup or computation plus writing -inf into the row), and the compile time
// of every schema of the corpus for this tokenizer. Each constrained run compiles
// its constraint afresh, so every mask it uses is computed during the run. The
// schema's shortest sentence is longer than the token budget, so every request
// generates exactly max_new_tokens in both modes: the same work.
//   structured_batch_bench [model dir or .gguf] [schema.json] [tokenizer dir]
//   (defaults: /tmp/llama1b-tok, bench/structured_nested_schema.json, the model dir)
// Knobs: LOOM_BENCH_CONCURRENT=32, LOOM_BENCH_NEW_TOKENS=64, LOOM_BENCH_ROUNDS=2,
// LOOM_BENCH_SYNC=1 also runs constrained with masks computed on the batching
// thread (ManagerOptions::prefetch_masks off).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "loom/batching/continuous_batching_manager.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom/structured/constraint.h"
#include "loom/tokenizer/tokenizer.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

namespace {

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct RunResult {
  double seconds = 0;
  int64_t generated = 0;
  double forward_seconds = 0;  // inside the model's steps (ManagerStats::step_seconds)
  int64_t steps = 0;
  std::vector<double> mask_seconds;
  structured::MaskCacheStats cache;
  int64_t valid_prefixes = 0;  // constrained outputs the grammar accepts as a prefix
};

enum class Mode { kUnconstrained, kPrefetch, kSynchronous };
const char* mode_name(Mode m) {
  return m == Mode::kUnconstrained ? "unconstrained" : m == Mode::kPrefetch ? "schema, masks prefetched" : "schema, masks on the loop";
}

RunResult run(Mode mode, const std::shared_ptr<batching::ModelRunner>& runner, const Tokenizer& tok,
              const std::shared_ptr<const structured::TokenVocabulary>& vocab, const std::string& schema,
              const std::vector<std::vector<int32_t>>& prompts, int64_t max_new) {
  std::shared_ptr<structured::Constraint> constraint;
  if (mode != Mode::kUnconstrained) {
    structured::ConstraintSpec spec;
    spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
    spec.text = schema;
    constraint = structured::Constraint::compile(spec, vocab).value();  // fresh: no mask cached
    constraint->set_recording(true);
  }
  batching::ContinuousBatchingConfig cfg;
  cfg.page_size = 64;
  cfg.num_blocks = 4 * static_cast<int64_t>(prompts.size()) + 16;
  cfg.max_batch_tokens = 512;
  GenerationConfig gc;
  gc.max_new_tokens = max_new;  // no EOS ids: every request runs to max_new
  batching::ManagerOptions opts;
  opts.prefetch_masks = mode != Mode::kSynchronous;
  auto m = batching::ContinuousBatchingManager::create(runner, gc, cfg, opts).value();
  for (const auto& p : prompts) {
    batching::RequestOptions o;
    o.max_new_tokens = max_new;
    o.constraint = constraint;
    m->add_request(p, o).value();
  }
  RunResult r;
  const auto t0 = Clock::now();
  if (!m->start().ok()) std::abort();
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto out = m->get_result(std::nullopt, 600.0);
    if (!out || out->status != batching::RequestStatus::kFinished) {
      std::fprintf(stderr, "request failed: %s\n", out ? out->error.c_str() : "timeout");
      std::exit(1);
    }
    r.generated += static_cast<int64_t>(out->generated_tokens.size());
    if (constraint) {
      structured::GrammarMatcher matcher(constraint->grammar());
      if (matcher.accept(tok.decode(out->generated_tokens, true).value())) ++r.valid_prefixes;
    }
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  (void)m->stop(true, 30.0);
  r.forward_seconds = m->stats().step_seconds;
  r.steps = m->stats().steps;
  if (constraint) {
    r.mask_seconds = constraint->take_mask_seconds();
    r.cache = constraint->cache_stats();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string src = LOOM_SOURCE_DIR_FOR_BENCH;
  const std::string dir = argc > 1 ? argv[1] : "/tmp/llama1b-tok";
  const std::string schema_path = argc > 2 ? argv[2] : src + "/bench/structured_nested_schema.json";
  const int64_t concurrent = env_int("LOOM_BENCH_CONCURRENT", 32);
  const int64_t max_new = env_int("LOOM_BENCH_NEW_TOKENS", 64);
  const int64_t rounds = env_int("LOOM_BENCH_ROUNDS", 2);
  const bool with_sync = env_int("LOOM_BENCH_SYNC", 1) != 0;

  auto model = models::Model::load(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  auto tok = Tokenizer::from_dir(argc > 3 ? argv[3] : dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  std::shared_ptr<batching::ModelRunner> runner(batching::ModelRunner::create(*model, "cpu").value().release());
  auto t = Clock::now();
  auto vocab = structured::TokenVocabulary::from_tokenizer(**tok);
  const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t).count();

  // Compile time of every corpus schema (grammar + automaton), and with the first mask.
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(src + "/tests/structured/schemas"))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<double> compile_ms, first_mask_ms;
  std::string largest;
  size_t largest_bytes = 0;
  double largest_compile = 0, largest_first = 0;
  for (const auto& f : files) {
    structured::ConstraintSpec spec;
    spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
    spec.text = read_file(f.string());
    auto c0 = Clock::now();
    auto c = structured::Constraint::compile(spec, vocab).value();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
    structured::ConstraintState st(c);
    st.allowed_tokens();
    const double with_mask = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
    compile_ms.push_back(ms);
    first_mask_ms.push_back(with_mask);
    if (spec.text.size() > largest_bytes) {
      largest_bytes = spec.text.size();
      largest = f.filename().string();
      largest_compile = ms;
      largest_first = with_mask;
    }
  }

  const std::string schema = read_file(schema_path);
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < concurrent; ++i) {
    const std::string text = "Request " + std::to_string(i) + ": describe service number " + std::to_string(i * 7 + 3) +
                             " and its replicas as a JSON configuration.";
    prompts.push_back((*tok)->encode(text, true).value().ids);
  }
  std::vector<Mode> modes = {Mode::kUnconstrained, Mode::kPrefetch};
  if (with_sync) modes.push_back(Mode::kSynchronous);
  std::map<Mode, RunResult> best;
  for (int64_t round = 0; round < rounds; ++round) {
    for (Mode mode : modes) {
      RunResult r = run(mode, runner, **tok, vocab, schema, prompts, max_new);
      std::fprintf(stderr, "round %lld %-28s %6.2f s  %lld tokens  %.1f tok/s  (%lld steps, %.2f s in the forward)\n",
                   static_cast<long long>(round + 1), mode_name(mode), r.seconds, static_cast<long long>(r.generated),
                   r.generated / r.seconds, static_cast<long long>(r.steps), r.forward_seconds);
      auto it = best.find(mode);
      if (it == best.end() || r.generated / r.seconds > it->second.generated / it->second.seconds) best[mode] = std::move(r);
    }
  }

  std::printf("model %s, tokenizer %d ids (trie of %zu nodes, %.0f ms), %lld requests x %lld new tokens, greedy, best of %lld\n",
              dir.c_str(), vocab->size(), vocab->nodes().size(), trie_ms, static_cast<long long>(concurrent),
              static_cast<long long>(max_new), static_cast<long long>(rounds));
  std::printf("schema %s\n\n", schema_path.c_str());
  std::printf("| run | tok/s | vs unconstrained | loop outside the forward, ms per step | mask per token p50 / p99 / max (ms) | masks computed: prefetched / on the loop, waited | valid prefixes |\n");
  std::printf("|---|---:|---:|---:|---|---|---:|\n");
  const double base = best[Mode::kUnconstrained].generated / best[Mode::kUnconstrained].seconds;
  for (Mode mode : modes) {
    const RunResult& r = best[mode];
    const double rate = r.generated / r.seconds;
    const double outside = (r.seconds - r.forward_seconds) / static_cast<double>(std::max<int64_t>(1, r.steps)) * 1e3;
    if (mode == Mode::kUnconstrained) {
      std::printf("| %s | %.1f | 1.00 | %.2f | | | |\n", mode_name(mode), rate, outside);
      continue;
    }
    std::printf("| %s | %.1f | %.3f | %.2f | %.4f / %.3f / %.2f | %llu / %llu, %llu | %lld/%lld |\n", mode_name(mode), rate, rate / base, outside,
                percentile(r.mask_seconds, 0.5) * 1e3, percentile(r.mask_seconds, 0.99) * 1e3,
                percentile(r.mask_seconds, 1.0) * 1e3, static_cast<unsigned long long>(r.cache.prefetched),
                static_cast<unsigned long long>(r.cache.misses), static_cast<unsigned long long>(r.cache.waited),
                static_cast<long long>(r.valid_prefixes), static_cast<long long>(concurrent));
  }
  std::printf("\ncompile, %zu corpus schemas: p50 %.2f ms, max %.2f ms; with the first mask: p50 %.2f ms, max %.2f ms\n",
              files.size(), percentile(compile_ms, 0.5), percentile(compile_ms, 1.0), percentile(first_mask_ms, 0.5),
              percentile(first_mask_ms, 1.0));
  std::printf("largest schema %s (%zu bytes): compile %.2f ms, with the first mask %.2f ms\n", largest.c_str(), largest_bytes,
              largest_compile, largest_first);
  return 0;
}
