// Structured outputs: compile time per schema of the corpus, and mask time per token
// (p50/p99) along seeded random walks through each schema, with a cold cache (every
// mask walks the vocabulary trie) and a warm one (the same walk again: what requests
// sharing a schema see). Prints a table; not a Google Benchmark (it reports
// percentiles).
//   build/bench/structured_bench [tokenizer.json] [schemas dir]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/structured/constraint.h"
#include "loom/structured/json_schema_to_grammar.h"
#include "loom/tokenizer/tokenizer.h"

using namespace loom;
using Clock = std::chrono::steady_clock;

static double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

static double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

int main(int argc, char** argv) {
  const std::string src = LOOM_SOURCE_DIR_FOR_BENCH;
  const std::string tok_path = argc > 1 ? argv[1] : src + "/models/loom-kjv-tiny/tokenizer.json";
  const std::string dir = argc > 2 ? argv[2] : src + "/tests/structured/schemas";
  auto tok = Tokenizer::from_path(tok_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto t0 = Clock::now();
  auto vocab = structured::TokenVocabulary::from_tokenizer(**tok);
  std::printf("tokenizer %s: %d ids, trie of %zu nodes built in %.1f ms\n", tok_path.c_str(), vocab->size(),
              vocab->nodes().size(), ms_since(t0));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::vector<double> compile_ms, cold, warm;
  double worst_compile = 0;
  std::string worst_name;
  std::mt19937 rng(7);
  for (const auto& f : files) {
    std::ifstream in(f);
    std::stringstream ss;
    ss << in.rdbuf();
    structured::ConstraintSpec spec;
    spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
    spec.text = ss.str();
    auto t = Clock::now();
    auto c = structured::Constraint::compile(spec, vocab);
    const double ms = ms_since(t);
    if (!c.ok()) {
      std::fprintf(stderr, "%s: %s\n", f.c_str(), c.status().to_string().c_str());
      return 1;
    }
    compile_ms.push_back(ms);
    if (ms > worst_compile) worst_compile = ms, worst_name = f.filename().string();
    // One walk of up to 64 tokens, then the same walk again on the now-warm cache.
    std::vector<int32_t> walk;
    for (int pass = 0; pass < 2; ++pass) {
      structured::ConstraintState st(*c);
      for (size_t step = 0; step < 64; ++step) {
        auto tm = Clock::now();
        auto mask = st.allowed_tokens();
        (pass == 0 ? cold : warm).push_back(ms_since(tm));
        if (pass == 1) {
          if (step >= walk.size()) break;
          if (!st.accept_token(walk[step]).ok()) return 2;
          continue;
        }
        std::vector<int32_t> allowed;
        for (size_t w = 0; w < mask->size(); ++w)
          for (int b = 0; b < 64; ++b)
            if (((*mask)[w] >> b) & 1) allowed.push_back(static_cast<int32_t>(w * 64 + b));
        if (allowed.empty()) break;
        const int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
        walk.push_back(pick);
        if (!st.accept_token(pick).ok()) return 2;
      }
    }
  }
  std::printf("%-34s %10s %10s %10s\n", "", "p50 ms", "p99 ms", "max ms");
  std::printf("%-34s %10.3f %10.3f %10.3f\n", ("compile (" + std::to_string(files.size()) + " schemas)").c_str(),
              percentile(compile_ms, 0.5), percentile(compile_ms, 0.99), worst_compile);
  std::printf("%-34s %10.3f %10.3f %10.3f\n", ("mask, cold cache (" + std::to_string(cold.size()) + " steps)").c_str(),
              percentile(cold, 0.5), percentile(cold, 0.99), percentile(cold, 1.0));
  std::printf("%-34s %10.4f %10.4f %10.4f\n", ("mask, warm cache (" + std::to_string(warm.size()) + " steps)").c_str(),
              percentile(warm, 0.5), percentile(warm, 0.99), percentile(warm, 1.0));
  std::printf("slowest compile: %s\n", worst_name.c_str());
  return 0;
}
