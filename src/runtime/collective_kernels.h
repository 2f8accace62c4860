// Kernels of the graph's collective ops (all_reduce, all_gather) over the
// process's tensor-parallel group (loom/runtime/collectives.h).
#pragma once

#include "loom/runtime/backend.h"

namespace loom::runtime {

OpKernel all_reduce_kernel();
OpKernel all_gather_kernel();

}  // namespace loom::runtime
