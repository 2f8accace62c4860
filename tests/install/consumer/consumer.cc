// A program outside loom's tree, built against an installed loom: greedy
// tokens of a prompt, printed space-separated (the install test compares them
// with the installed `loom generate`).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "loom/batching/generate.h"
#include "loom/batching/model_runner.h"
#include "loom/models/model.h"
#include "loom_portable.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: consumer MODEL_DIR N ID...\n");
    return 2;
  }
  auto model = loom::models::Model::load(argv[1]);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().to_string().c_str());
    return 1;
  }
  auto runner = loom::batching::ModelRunner::create(*model).value();
  std::vector<int32_t> prompt;
  for (int i = 3; i < argc; ++i) prompt.push_back(std::atoi(argv[i]));
  loom::batching::GenerateOptions o;
  o.max_new_tokens = std::atoi(argv[2]);
  auto r = loom::batching::generate(*runner, prompt, o);
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().to_string().c_str());
    return 1;
  }
  for (int32_t id : r->generated_ids) std::printf("%d ", id);
  std::printf("\n");
  return 0;
}
