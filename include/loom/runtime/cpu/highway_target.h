// Which Highway target the Highway-built kernels dispatch to now ("AVX3_DL",
// "AVX2", "EMU128", …): it follows cpu::active_isa() (loom/core/cpu_features.h).
#pragma once

#include <string>

namespace loom::cpu {

std::string highway_target_name();

}  // namespace loom::cpu
