// Encode throughput of loom's tokenizer (MB/s of UTF-8 input), one thread and a thread
// pool, on the parity corpus. bench/tokenizer_bench.sh runs it next to the `tokenizers`
// library (Node binding) and prints the comparison table.
//
//   tokenizer_bench [--threads N] [--corpus corpus.json] [--seconds S] name=tokenizer.json ...
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/core/thread_pool.h"
#include "loom/tokenizer/tokenizer.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds used by the whole process: on a shared machine, MB per CPU-second is a
// steadier measure of single-thread speed than wall time.
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = loom::default_num_threads();
  double seconds = 2.0;
  // Default: the oracle corpus of the source tree this file belongs to.
  std::string src = __FILE__;
  std::string root = src.substr(0, src.rfind("/bench/"));
  std::string corpus_path = root + "/.cache/tokenizer-oracles/corpus.json";
  std::vector<std::pair<std::string, std::string>> tokenizers;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = std::atoi(argv[++i]);
    } else if (a == "--corpus" && i + 1 < argc) {
      corpus_path = argv[++i];
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a.find('=') != std::string::npos) {
      tokenizers.push_back({a.substr(0, a.find('=')), a.substr(a.find('=') + 1)});
    } else {
      std::fprintf(stderr, "usage: %s [--threads N] [--corpus corpus.json] [--seconds S] name=tokenizer.json ...\n", argv[0]);
      return 2;
    }
  }
  std::ifstream f(corpus_path);
  if (!f) {
    std::fprintf(stderr, "tokenizer_bench: %s missing (run scripts/install-test-oracles)\n", corpus_path.c_str());
    return 2;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::vector<std::string> texts;
  size_t bytes = 0;
  for (const auto& c : nlohmann::json::parse(ss.str())) {
    texts.push_back(c["text"].get<std::string>());
    bytes += texts.back().size();
  }
  loom::ThreadPool pool(threads);
  std::printf("tokenizer\tthreads\twall_MB/s\tcpu_MB/s\n");
  for (const auto& [name, path] : tokenizers) {
    auto tok = loom::Tokenizer::from_file(path);
    if (!tok.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(), tok.status().to_string().c_str());
      return 1;
    }
    // Warm up (fills the BPE caches as a long-running server's would be).
    for (const auto& t : texts) (void)(*tok)->encode(t, true);
    for (int mode = 0; mode < 2; ++mode) {
      size_t done = 0;
      double c0 = cpu_now();
      double t0 = now(), t1 = t0;
      while (t1 - t0 < seconds) {
        if (mode == 0) {
          for (const auto& t : texts) {
            auto e = (*tok)->encode(t, true);
            if (!e.ok()) return 1;
          }
        } else {
          auto e = (*tok)->encode_batch(texts, true, &pool);
          if (!e.ok()) return 1;
        }
        done += bytes;
        t1 = now();
      }
      double cpu = cpu_now() - c0;
      std::printf("%s\t%d\t%.2f\t%.2f\n", name.c_str(), mode == 0 ? 1 : threads, done / (t1 - t0) / 1e6, done / cpu / 1e6);
      std::fflush(stdout);
    }
  }
  return 0;
}
