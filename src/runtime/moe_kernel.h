// The `moe` graph op on the CPU backends (op_kernels.cc registers it): the
// grouped kernel of runtime/cpu/moe.h, or its scalar reference.
#pragma once

#include "loom/runtime/backend.h"

namespace loom::runtime {

OpKernel moe_op_kernel(bool reference);

}  // namespace loom::runtime
