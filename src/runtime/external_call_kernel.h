// The runtime side of the `external_call` op (graph/external_functions.h).
#pragma once

#include "loom/runtime/backend.h"

namespace loom::runtime {

// The same kernel in both backends: the callee is the plugin's code either way.
OpKernel external_call_op_kernel();

}  // namespace loom::runtime
