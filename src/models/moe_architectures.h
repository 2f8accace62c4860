// MixtralForCausalLM and Qwen2MoeForCausalLM: the Mistral and Qwen2 decoders
// with sparse MoE MLPs (see moe_architectures.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture mixtral_architecture();
Architecture qwen2_moe_architecture();

}  // namespace loom::models
