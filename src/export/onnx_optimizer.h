// The ONNX optimizer (stage "optimize" of onnx_exporter.cc): folds nodes whose
// inputs are all initializers where folding is trivial (Transpose of a 2-D
// weight, Add of a scalar to a weight), removes Identity nodes feeding graph
// outputs by renaming their producer's output, and drops dead nodes and unused
// initializers.
#pragma once

#include <onnx/onnx_pb.h>

namespace loom::exporting {

struct OnnxOptimizeStats {
  int folded = 0;
  int dead_removed = 0;  // nodes and initializers
};

OnnxOptimizeStats optimize_onnx(onnx::GraphProto& g);

}  // namespace loom::exporting
