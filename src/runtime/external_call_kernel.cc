#include "runtime/external_call_kernel.h"

#include <vector>

#include "loom/graph/external_call_abi.h"
#include "loom/graph/external_functions.h"

namespace loom::runtime {
namespace {

struct ExternalCallState : NodeState {
  graph::ExternalFunction fn;
  std::vector<float> weight;  // (add_)rms_norm: f32, weight_offset applied; linear_t: f32 [in, out]
  float eps = 0;              // (add_)rms_norm
  int64_t out_features = 0;   // linear_t
};

}  // namespace

OpKernel external_call_op_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph& g, const graph::Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<ExternalCallState>();
    LOOM_ASSIGN_OR_RETURN(s->fn, graph::find_external_function(n.attr_str("callee")));
    if (s->fn.signature != n.attr_str("signature"))
      return invalid_argument(n.scope + ": external_call of '" + s->fn.key + "' as " + n.attr_str("signature") +
                              ", but it is registered as " + s->fn.signature);
    const bool add_norm = s->fn.signature == LOOM_CALL_ADD_RMS_NORM_F32_V1;
    if (s->fn.signature == LOOM_CALL_RMS_NORM_F32_V1 || add_norm) {
      const graph::Value& w = g.value(n.inputs[add_norm ? 2 : 1]);
      if (!w.tensor.defined())
        return invalid_argument(n.scope + ": external_call " + s->fn.signature + " needs a weight parameter");
      s->weight = w.tensor.to_f32_vector();
      s->eps = static_cast<float>(n.attr_float("eps"));
      const float offset = static_cast<float>(n.attr_float("weight_offset", 0.0));
      for (float& v : s->weight) v += offset;
    } else if (s->fn.signature == LOOM_CALL_LINEAR_T_F32_V1) {
      const graph::Value& w = g.value(n.inputs[1]);
      if (!w.tensor.defined() || w.tensor.rank() != 2)
        return invalid_argument(n.scope + ": external_call " + LOOM_CALL_LINEAR_T_F32_V1 + " needs a 2-D weight parameter");
      s->weight = w.tensor.to_f32_vector();
      s->out_features = w.tensor.dim(1);
    }
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [](KernelArgs& a) -> Status {
    const auto& s = *static_cast<ExternalCallState*>(a.state);
    const int64_t rows = a.in[0].dim(0), cols = a.in[0].dim(1);
    if (rows == 0) return Status::Ok();
    if (s.fn.signature == LOOM_CALL_RMS_NORM_F32_V1) {
      reinterpret_cast<LoomRmsNormF32V1>(s.fn.entry)(a.in[0].data_as<float>(), s.weight.data(),
                                                     a.out[0].data_as<float>(), rows, cols, s.eps);
    } else if (s.fn.signature == LOOM_CALL_ADD_RMS_NORM_F32_V1) {
      reinterpret_cast<LoomAddRmsNormF32V1>(s.fn.entry)(a.in[0].data_as<float>(), a.in[1].data_as<float>(), s.weight.data(),
                                                        a.out[0].data_as<float>(), a.out[1].data_as<float>(), rows,
                                                        cols, s.eps);
    } else if (s.fn.signature == LOOM_CALL_LINEAR_T_F32_V1) {
      reinterpret_cast<LoomLinearTF32V1>(s.fn.entry)(a.in[0].data_as<float>(), s.weight.data(),
                                                     a.out[0].data_as<float>(), rows, cols, s.out_features);
    } else {
      reinterpret_cast<LoomSiluAndMulF32V1>(s.fn.entry)(a.in[0].data_as<float>(), a.in[1].data_as<float>(),
                                                        a.out[0].data_as<float>(), rows, cols);
    }
    return Status::Ok();
  };
  return k;
}

}  // namespace loom::runtime
