// GPT2LMHeadModel as a configuration of the shared decoder (see gpt2.cc).
#pragma once

#include "loom/models/architecture.h"

namespace loom::models {

Architecture gpt2_architecture();

}  // namespace loom::models
