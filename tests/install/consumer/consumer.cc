// A program outside loom's tree, built against an installed loom. Prints the
// greedy continuation of a prompt twice, space-separated, one line each: from
// loom's engine (libloom_*) and from a portable program run by the portable
// runtime (libloom_portable). The install test compares both with the
// installed `loom generate`.
//   consumer MODEL_DIR PROGRAM.lpte N ID...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom_portable.h"

namespace {

int engine_tokens(const char* dir, const std::vector<int32_t>& prompt, int n) {
  auto model = loom::models::Model::load(dir);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  auto runner = loom::batching::ModelRunner::create(*model);
  if (!runner.ok()) {
    std::fprintf(stderr, "%s\n", runner.status().to_string().c_str());
    return 1;
  }
  loom::batching::GenerateOptions o;
  o.max_new_tokens = n;
  auto r = loom::batching::generate(**runner, prompt, o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
    return 1;
  }
  for (int32_t id : r->generated_ids) std::printf("%d ", id);
  std::printf("\n");
  return 0;
}

int portable_tokens(const char* path, std::vector<int32_t> tokens, int n) {
  lp_program* p = lp_program_load(path);
  if (!p) {
    std::fprintf(stderr, "%s: %s\n", path, lp_last_error());
    return 1;
  }
  std::vector<float> logits(static_cast<size_t>(lp_program_vocab_size(p)));
  int64_t past = 0;
  std::vector<int32_t> feed = tokens;
  for (int step = 0; step < n; ++step) {
    if (lp_run(p, feed.data(), static_cast<int64_t>(feed.size()), past, logits.data()) != 0) {
      std::fprintf(stderr, "lp_run: %s\n", lp_error(p));
      lp_free(p);
      return 1;
    }
    past += static_cast<int64_t>(feed.size());
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::printf("%d ", next);
    feed.assign(1, next);
  }
  std::printf("\n");
  lp_free(p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: consumer MODEL_DIR PROGRAM.lpte N ID...\n");
    return 2;
  }
  std::vector<int32_t> prompt;
  for (int i = 4; i < argc; ++i) prompt.push_back(std::atoi(argv[i]));
  const int n = std::atoi(argv[3]);
  if (int rc = engine_tokens(argv[1], prompt, n)) return rc;
  return portable_tokens(argv[2], prompt, n);
}
