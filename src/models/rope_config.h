// A decoder's RoPE settings from config.json's rope_theta / rope_scaling (or
// rope_parameters): every scaling type ModelConfig parses, the rotary width
// from partial_rotary_factor. Defined in architectures.cc.
#pragma once

#include "loom/io/model_config.h"
#include "loom/models/layers.h"

namespace loom::models {

RopeSettings rope_from_config(const ModelConfig& c);

}  // namespace loom::models
