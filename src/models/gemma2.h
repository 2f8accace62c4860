// Gemma2ForCausalLM as a configuration of the shared decoder (see gemma2.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture gemma2_architecture();

}  // namespace loom::models
