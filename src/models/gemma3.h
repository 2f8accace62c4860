// Gemma3ForCausalLM and the language model of Gemma3ForConditionalGeneration
// as configurations of the shared decoder (see gemma3.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture gemma3_text_architecture();  // model_type gemma3_text: Gemma3ForCausalLM
Architecture gemma3_architecture();       // model_type gemma3: Gemma3ForConditionalGeneration (text only)

}  // namespace loom::models
