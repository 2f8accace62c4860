// Olmo2ForCausalLM and GraniteForCausalLM as configurations of the shared decoder
// (see olmo2.cc and granite.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture olmo2_architecture();
Architecture granite_architecture();

}  // namespace loom::models
