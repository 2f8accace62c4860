// The `moe` op (a sparse MoE block, graph/op_schemas.cc) in ONNX, for
// onnx_lowering_table(): a dense lowering — every expert on every token, the
// results weighted by the top-k routing weights scattered into an [.., E]
// tensor (zero for experts a token did not choose). Exact, but E / top_k times
// the expert compute of loom's grouped kernel.
#pragma once

#include "onnx_lowering.h"

namespace loom::exporting {

Status onnx_lower_moe(OnnxLowering& L, const graph::Node& n);

}  // namespace loom::exporting
