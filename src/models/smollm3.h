// SmolLM3ForCausalLM as a configuration of the shared decoder (see smollm3.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture smollm3_architecture();

}  // namespace loom::models
