// MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM: the
// Mistral, Qwen2 and Qwen3 decoders with sparse MoE MLPs (see moe_architectures.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture mixtral_architecture();
Architecture qwen2_moe_architecture();
Architecture qwen3_moe_architecture();

}  // namespace loom::models
