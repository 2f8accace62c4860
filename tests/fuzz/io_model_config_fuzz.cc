// config.json from the fuzzer: ModelConfig::from_json must accept it or name
// what is wrong, and an accepted config must be self-consistent for the code
// that reads it (a layer type per layer, a rotary width within the head).
#include <algorithm>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "fuzz_util.h"
#include "loom/io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(loom::fuzz::as_text(data, size), nullptr, false);
  if (j.is_discarded()) return 0;
  auto config = loom::ModelConfig::from_json(j, "config.json");
  if (!config.ok()) return 0;
  // Bounded so a legal but huge layer count does not turn into a slow input.
  const int64_t layers = std::min<int64_t>(config->num_hidden_layers, 1 << 12);
  for (int64_t layer = 0; layer < layers; ++layer) (void)config->is_sliding_layer(layer);
  if (config->rotary_dim() < 0 || config->rotary_dim() > config->head_dim) std::abort();
  return 0;
}
