// generation_config.json from the fuzzer: generation_config_from_json must accept
// it or name what is wrong, and an accepted config must pass its own validation
// and give a token budget for any prompt length.
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/batching/generation_config_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(loom::fuzz::as_text(data, size), nullptr, false);
  if (j.is_discarded()) return 0;
  auto config = loom::batching::generation_config_from_json(j, "generation_config.json");
  if (!config.ok()) return 0;
  if (!config->validate().ok()) std::abort();
  for (int64_t prompt : {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{1} << 40})
    if (config->new_token_budget(prompt) < 0) std::abort();
  return 0;
}
