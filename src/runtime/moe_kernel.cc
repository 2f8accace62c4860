#include "runtime/moe_kernel.h"

#include "loom/runtime/cpu/moe.h"

namespace loom::runtime {
namespace {

struct MoeState : NodeState {
  cpu::PackedMoe packed;  // empty on the reference backend
  cpu::MoeParams params;
};

bool present(const TensorRefs& in, size_t i) { return in.size() > i && in[i].defined(); }

}  // namespace

OpKernel moe_op_kernel(bool reference) {
  OpKernel k;
  k.prepare = [reference](const graph::Graph& g, const graph::Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<MoeState>();
    s->params.top_k = n.attr_int("top_k");
    s->params.norm_topk_prob = n.attr_int("norm_topk_prob") != 0;
    auto act = cpu::activation_from_name(n.attr_str("activation", "silu"));
    if (!act.ok()) return act.status().with_context("moe in " + n.scope);
    s->params.activation = act.value();
    const std::string routing = n.attr_str("routing", "softmax_topk");
    s->params.routing = routing == "topk_softmax" ? cpu::MoeRouting::kTopKSoftmax : cpu::MoeRouting::kSoftmaxTopK;
    s->params.swiglu_limit = static_cast<float>(n.attr_float("swiglu_limit", 0.0));
    s->params.swiglu_alpha = static_cast<float>(n.attr_float("swiglu_alpha", 1.702));
    if (!reference) {
      const bool shared = n.inputs.size() > 5 && n.inputs[5] != graph::kNoValue;
      auto given = [&](size_t i) { return n.inputs.size() > i && n.inputs[i] != graph::kNoValue ? &g.value(n.inputs[i]).tensor : nullptr; };
      auto packed = cpu::PackedMoe::pack(g.value(n.inputs[1]).tensor, g.value(n.inputs[2]).tensor,
                                         g.value(n.inputs[3]).tensor, shared ? &g.value(n.inputs[5]).tensor : nullptr,
                                         {given(6), given(7), given(8)});
      if (!packed.ok()) return packed.status().with_context("moe in " + n.scope);
      s->packed = std::move(packed).value();
    }
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [reference](KernelArgs& a) -> Status {
    const auto* s = static_cast<const MoeState*>(a.state);
    const Tensor& x = a.in[0];
    const float* shared = present(a.in, 4) ? a.in[4].data_as<float>() : nullptr;
    try {
      if (reference)
        cpu::moe_ref(x.data_as<float>(), x.dim(0), a.in[1], a.in[2], a.in[3], s->params, shared,
                     present(a.in, 5) ? &a.in[5] : nullptr, a.out[0].data_as<float>(),
                     {present(a.in, 6) ? &a.in[6] : nullptr, present(a.in, 7) ? &a.in[7] : nullptr,
                      present(a.in, 8) ? &a.in[8] : nullptr});
      else
        cpu::moe(x.data_as<float>(), x.dim(0), s->packed, s->params, shared, a.out[0].data_as<float>(), a.pool);
    } catch (const Error& e) {
      return e.status().with_context("moe in " + a.node.scope);
    }
    return Status::Ok();
  };
  return k;
}

}  // namespace loom::runtime
