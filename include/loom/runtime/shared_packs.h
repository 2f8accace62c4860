// One packed copy per weight tensor for the cpu backend's nodes. A tied LM head and
// token embedding read one tensor: the linear packs it (and releases the file pages
// under it), and the embedding looks its rows up in that same copy rather than
// faulting the released pages back in. Executors built on one model share the
// copies too.
#pragma once

#include <memory>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/runtime/cpu/machine_bounds.h"
#include "loom/runtime/cpu/matmul.h"

namespace loom::runtime {

// The packed copy of weight (+ bias), packed by the first caller and shared while
// anyone holds it. Safe to call from parallel prepares.
Result<std::shared_ptr<const cpu::PackedLinear>> shared_packed_linear(const Tensor& weight, const Tensor* bias);

// The weights every packed copy still held streams per call (PackedLinear::streamed_weights),
// each copy once: the bytes a decode step of the models loaded now reads, which `loom
// bench` reads with a plain loop to measure its read bound on them.
std::vector<cpu::ByteRange> live_packed_weights();

}  // namespace loom::runtime
