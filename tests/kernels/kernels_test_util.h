// A tiny Llama-shaped decoder recorded the way models/ records one (module
// paths as scopes, residual adds in the layer's scope), plus its ModuleView,
// so kernels/ can be tested without models/.
#pragma once

#include <string>
#include <vector>

#include "loom/graph/graph.h"
#include "loom/kernels/module_view.h"

namespace loom::kernels::testing {

struct TinyDecoder {
  int layers = 2;
  int64_t hidden = 8;
  int64_t q_out = 8;       // 2 heads × 4
  int64_t kv_out = 4;      // 1 kv head × 4 (GQA: q/k/v sizes differ)
  int64_t intermediate = 12;
  // Rejecting variants:
  bool norm_output_also_in_residual = false;  // layer adds the norm's output (not its input) back
  bool mlp_reads_two_tensors = false;         // mlp.down_proj also reads the residual stream
};

struct Recorded {
  graph::Graph graph;
  ModuleView view;  // view.graph points at graph: keep Recorded in place (no copies)
};

inline void record(const TinyDecoder& d, Recorded* out) {
  graph::Graph& g = out->graph;
  std::vector<ModuleInfo>& mods = out->view.modules;
  const int tokens = g.add_symbol("tokens");
  // Each module's own parameters; ModuleInfo::parameters gets the whole subtree at the end.
  std::vector<std::pair<std::string, ParamInfo>> own;
  auto param = [&](const std::string& name, Shape shape) {
    return g.add_parameter(name, Tensor::zeros(DType::kF32, std::move(shape)));
  };
  auto linear = [&](const std::string& path, graph::ValueId x, int64_t in, int64_t outf) {
    mods.push_back({path, "Linear", "Linear", {}});
    own.push_back({path, {path + ".weight", {outf, in}}});
    return g.add_node("linear", {x, param(path + ".weight", {outf, in})}, {}, path)[0];
  };
  auto norm = [&](const std::string& path, graph::ValueId x) {
    mods.push_back({path, "LlamaRMSNorm", "RMSNorm", {}});
    own.push_back({path, {path + ".weight", {d.hidden}}});
    return g.add_node("rms_norm", {x, param(path + ".weight", {d.hidden})}, {{"eps", 1e-6}}, path)[0];
  };

  graph::ValueId x = g.add_input("hidden", DType::kF32, {graph::Dim::sym(tokens), graph::Dim::fixed(d.hidden)});
  mods.push_back({"model", "LlamaModel", "Model", {}});
  for (int i = 0; i < d.layers; ++i) {
    const std::string L = "model.layers." + std::to_string(i);
    mods.push_back({L, "LlamaDecoderLayer", "DecoderLayer", {}});
    graph::ValueId h = norm(L + ".input_layernorm", x);

    const std::string A = L + ".self_attn";
    mods.push_back({A, "LlamaAttention", "Attention", {}});
    graph::ValueId q = linear(A + ".q_proj", h, d.hidden, d.q_out);
    graph::ValueId k = linear(A + ".k_proj", h, d.hidden, d.kv_out);
    graph::ValueId v = linear(A + ".v_proj", h, d.hidden, d.kv_out);
    // Stand-in for attention: mixes q, k and v in the attention's own scope.
    graph::ValueId kv = g.add_node("mul", {k, v}, {}, A)[0];
    graph::ValueId kvq = g.add_node("linear", {kv, param(A + ".mix", {d.q_out, d.kv_out})}, {}, A)[0];
    own.push_back({A, {A + ".mix", {d.q_out, d.kv_out}}});
    graph::ValueId mixed = g.add_node("add", {q, kvq}, {}, A)[0];
    graph::ValueId attn = linear(A + ".o_proj", mixed, d.q_out, d.hidden);

    graph::ValueId residual = g.add_node("add", {x, attn}, {}, L)[0];
    graph::ValueId n2 = norm(L + ".post_attention_layernorm", residual);

    const std::string M = L + ".mlp";
    mods.push_back({M, "LlamaMLP", "MLP", {}});
    graph::ValueId gate = linear(M + ".gate_proj", n2, d.hidden, d.intermediate);
    graph::ValueId up = linear(M + ".up_proj", n2, d.hidden, d.intermediate);
    graph::ValueId act = g.add_node("silu", {gate}, {}, M)[0];
    graph::ValueId prod = g.add_node("mul", {act, up}, {}, M)[0];
    graph::ValueId m = linear(M + ".down_proj", prod, d.intermediate, d.hidden);
    if (d.mlp_reads_two_tensors) m = g.add_node("add", {m, residual}, {}, M)[0];

    x = g.add_node("add", {d.norm_output_also_in_residual ? n2 : residual, m}, {}, L)[0];
  }
  graph::ValueId final_norm = norm("model.norm", x);
  g.mark_output("hidden_out", final_norm);
  for (auto& m : mods)
    for (const auto& [owner, p] : own)
      if (scope_within(owner, m.path)) m.parameters.push_back(p);
  out->view.graph = &out->graph;
}

}  // namespace loom::kernels::testing
