// The Python configs cross into C++ as JSON text (their to_dict()), parsed and
// validated by loom's own readers.
#pragma once

#include <string>

#include "loom/batching/continuous_batching_config.h"
#include "loom/generation/generation_config.h"

namespace loom::python {

GenerationConfig parse_generation_config(const std::string& json_text);
batching::ContinuousBatchingConfig parse_cb_config(const std::string& json_text);

}  // namespace loom::python
