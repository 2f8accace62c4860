// GptOssForCausalLM (modeling_gpt_oss.py): see gpt_oss.cc.
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture gpt_oss_architecture();

}  // namespace loom::models
