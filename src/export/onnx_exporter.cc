#include "loom/export/onnx_exporter.h"

#include "export/quantized_weights.h"

#include <filesystem>
#include <fstream>

#include "onnx_graph_builder.h"
#include "onnx_lowering.h"
#include "onnx_model_fixes.h"
#include "onnx_optimizer.h"

namespace loom::exporting {
namespace {

namespace fs = std::filesystem;

// ONNX IR version to write for an opset (the IR that introduced it), so older
// consumers — Debian's onnx 1.12 checker accepts IR ≤ 8 — can read opsets ≤ 17.
int64_t ir_version_for(int opset) {
  if (opset <= 18) return 8;
  if (opset <= 20) return 9;
  if (opset <= 22) return 10;
  return 11;
}

// A graph input/output: each dim is a fixed number or a name.
void value_info(onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<std::string>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem);
  auto* shape = t->mutable_shape();
  for (const std::string& d : dims) {
    auto* dim = shape->add_dim();
    if (!d.empty() && d.find_first_not_of("0123456789") == std::string::npos) dim->set_dim_value(std::stoll(d));
    else dim->set_dim_param(d);
  }
}

Status write_model(onnx::ModelProto& m, const std::string& path, int64_t threshold, OnnxExportReport& r) {
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const std::string data_name = p.filename().string() + ".data";
  const fs::path data_path = p.parent_path() / data_name;
  std::ofstream data;
  int64_t offset = 0;
  for (onnx::TensorProto& t : *m.mutable_graph()->mutable_initializer()) {
    const int64_t bytes = static_cast<int64_t>(t.raw_data().size());
    if (threshold < 0 || !t.has_raw_data() || bytes < threshold) {
      r.inline_bytes += bytes;
      continue;
    }
    if (!data.is_open()) {
      data.open(data_path, std::ios::binary | std::ios::trunc);
      if (!data) return io_error("onnx export: cannot write " + data_path.string());
    }
    const int64_t aligned = (offset + 63) / 64 * 64;  // keeps each tensor's data aligned for mmap readers
    if (aligned > offset) data.write(std::string(static_cast<size_t>(aligned - offset), '\0').data(), aligned - offset);
    data.write(t.raw_data().data(), bytes);
    auto add = [&](const char* k, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", data_name);
    add("offset", std::to_string(aligned));
    add("length", std::to_string(bytes));
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    t.clear_raw_data();
    offset = aligned + bytes;
    r.external_bytes += bytes;
  }
  if (data.is_open()) {
    data.close();
    if (!data) return io_error("onnx export: writing " + data_path.string() + " failed");
    r.external_data_file = data_name;
  } else {
    std::error_code ec;
    fs::remove(data_path, ec);  // a stale file from an earlier export would mislead
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return io_error("onnx export: cannot write " + path);
  if (m.ByteSizeLong() > (size_t{2} << 30) - 1)
    return invalid_argument("onnx export: the model proto exceeds protobuf's 2 GiB; lower --external-data-threshold");
  if (!m.SerializeToOstream(&f)) return io_error("onnx export: serializing " + path + " failed");
  return Status::Ok();
}

}  // namespace

std::vector<std::string> OnnxExportReport::lines() const {
  std::vector<std::string> out = capture.lines();
  if (!signature.empty()) out.push_back("signature: " + signature);
  for (const auto& [op, n] : lowered) out.push_back("lowered " + op + ": " + std::to_string(n) + " nodes");
  for (const auto& [op, n] : contrib_ops) out.push_back("contrib op " + op + ": " + std::to_string(n) + " nodes");
  for (const std::string& f : contrib_fallbacks) out.push_back("contrib fallback " + f);
  for (const std::string& f : model_fixes) out.push_back("model fix " + f);
  if (!optimizer_disabled.empty()) out.push_back("optimizer disabled: " + optimizer_disabled);
  else out.push_back("optimizer: " + std::to_string(folded) + " folded, " + std::to_string(dead_removed) + " dead removed");
  out.push_back("onnx: " + std::to_string(nodes) + " nodes, " + std::to_string(initializers) + " initializers, " +
                std::to_string(inline_bytes) + " bytes inline, " + std::to_string(external_bytes) + " bytes in " +
                (external_data_file.empty() ? std::string("no external file") : external_data_file));
  return out;
}

Status export_onnx(const models::Model& model, const std::string& path, const OnnxExportOptions& o,
                   OnnxExportReport* report) {
  OnnxExportReport local;
  OnnxExportReport& r = report ? *report : local;
  exporters::note_dequantized_weights(model, "onnx export");
  if (o.ops != "standard" && o.ops != "ort")
    return invalid_argument("onnx export: --onnx-ops must be 'standard' or 'ort', got '" + o.ops + "'");
  if (o.opset < kOnnxMinOpset || o.opset > kOnnxMaxOpset)
    return invalid_argument("onnx export: opset " + std::to_string(o.opset) + " outside the supported range [" +
                            std::to_string(kOnnxMinOpset) + ", " + std::to_string(kOnnxMaxOpset) + "]");
  if (!o.dynamic && (o.batch_size < 1 || o.sequence_length < 1 || o.past_length < 0))
    return invalid_argument("onnx export: a static export needs --batch-size ≥ 1, --seq-len ≥ 1 and --past-length ≥ 0 "
                            "(got " + std::to_string(o.batch_size) + ", " + std::to_string(o.sequence_length) + ", " +
                            std::to_string(o.past_length) + ")");
  const ModelConfig& cfg = model.config();
  if (const std::string why = onnx_export_skip_reason(cfg.model_type, o.ops); !why.empty())
    return unsupported("onnx export: model_type '" + cfg.model_type + "' is on the export skip list (" + o.ops +
                       " ops): " + why);
  register_builtin_onnx_fixes();

  // ── Stage 1: capture — the step graph with the "onnx" backend's op-level patches ──
  // ── Stage 2: node fixes — the "onnx" backend's per-node rewrites (gather_rows dropped) ──
  // ── Stage 3: program fixes — the "onnx" backend's whole-program rewrites ──
  // export_program runs these three stages for the backend; the graph stays dynamic.
  ProgramExportOptions po;
  po.backend = "onnx";
  po.strict = o.strict;
  LOOM_ASSIGN_OR_RETURN(ExportedProgram program, export_program(model, po, &r.capture));
  const graph::Graph& g = program.graph;

  // ── Stage 4: signature — Optimum's decoder inputs and outputs ──
  onnx::ModelProto m;
  m.set_ir_version(ir_version_for(o.opset));
  m.set_producer_name("loom");
  m.set_producer_version(LOOM_VERSION);
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(o.opset);
  if (o.ops == "ort") {  // ONNX Runtime's contrib ops are all version 1 of their domain
    auto* ms = m.add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
  }
  auto meta = [&](const std::string& k, const std::string& v) {
    auto* e = m.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  };
  meta("model_type", cfg.model_type);
  meta("loom.onnx_ops", o.ops);
  r.signature = o.dynamic ? "dynamic (batch_size, sequence_length, past_sequence_length)"
                          : "static batch " + std::to_string(o.batch_size) + ", sequence " +
                                std::to_string(o.sequence_length) + ", past " + std::to_string(o.past_length);
  meta("loom.signature", r.signature);
  for (const auto& [k, v] : program.metadata)
    if (k.rfind("cache.layer.", 0) == 0) meta(k, v);
  onnx::GraphProto& og = *m.mutable_graph();
  og.set_name(cfg.model_type.empty() ? "loom" : cfg.model_type);
  onnx_ir::GraphBuilder b(&og);
  OnnxLowering L{b, g, o.opset};
  L.ort = o.ops == "ort";
  L.rope_positions = cfg.max_position_embeddings;
  // Dims: Optimum's names (dynamic), or numbers (static).
  std::string B = "batch_size", S = "sequence_length", P = "past_sequence_length",
              T = "past_sequence_length + sequence_length";
  if (!o.dynamic) {
    L.static_batch = o.batch_size;
    L.static_sequence = o.sequence_length;
    L.static_past = o.past_length;
    B = std::to_string(o.batch_size);
    S = std::to_string(o.sequence_length);
    P = std::to_string(o.past_length);
    T = std::to_string(o.past_length + o.sequence_length);
  }
  L.input_ids = "input_ids";
  L.attention_mask = "attention_mask";
  L.position_ids = "position_ids";
  value_info(og.add_input(), L.input_ids, onnx::TensorProto::INT64, {B, S});
  value_info(og.add_input(), L.attention_mask, onnx::TensorProto::INT64, {B, T});
  value_info(og.add_input(), L.position_ids, onnx::TensorProto::INT64, {B, S});
  const auto& layers = model.module().settings().layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto li = static_cast<int64_t>(i);
    const std::string kv = std::to_string(layers[i].num_kv_heads), d = std::to_string(layers[i].head_dim);
    L.past_key[li] = "past_key_values." + std::to_string(i) + ".key";
    L.past_value[li] = "past_key_values." + std::to_string(i) + ".value";
    L.present_key[li] = "present." + std::to_string(i) + ".key";
    L.present_value[li] = "present." + std::to_string(i) + ".value";
    value_info(og.add_input(), L.past_key[li], onnx::TensorProto::FLOAT, {B, kv, P, d});
    value_info(og.add_input(), L.past_value[li], onnx::TensorProto::FLOAT, {B, kv, P, d});
  }
  for (const char* name : {"input_ids", "positions"})
    if (g.input(name) == graph::kNoValue) return internal_error(std::string("onnx export: the step graph has no '") + name + "' input");
  L.names[g.input("input_ids")] = L.input_ids;
  L.names[g.input("positions")] = L.position_ids;

  // ── Stage 5: lowering — each loom op through the translation table (--onnx-ops ort: the contrib table first) ──
  const auto& table = onnx_lowering_table();
  const auto& ort_table = onnx_ort_lowering_table();
  for (const graph::Node& n : g.nodes()) {
    if (L.ort) {
      if (auto c = ort_table.find(n.op); c != ort_table.end()) {
        LOOM_RETURN_IF_ERROR(c->second(L, n));
        ++r.lowered[n.op];
        continue;
      }
    }
    if (n.op == "all_reduce" || n.op == "all_gather")
      return unsupported("onnx export: " + n.op + " (" + n.scope + "): this graph is one rank's shard of a tensor-parallel model (" +
                         std::to_string(n.attr_int("parts", 0)) + " ranks); export the whole model, without --tensor-parallel");
    auto it = table.find(n.op);
    if (it == table.end())
      return unsupported("onnx export: no ONNX lowering for op '" + n.op + "' (" + n.scope +
                         "); add one to onnx_lowering_table() or a node fix for backend \"onnx\"");
    LOOM_RETURN_IF_ERROR(it->second(L, n));
    ++r.lowered[n.op];
  }
  const graph::ValueId logits = g.output("logits");
  if (logits == graph::kNoValue || !L.names.count(logits)) return internal_error("onnx export: no lowered logits output");
  og.add_node()->CopyFrom([&] {
    onnx::NodeProto id;
    id.set_op_type("Identity");
    id.set_name("/logits/Identity");
    id.add_input(L.names.at(logits));
    id.add_output("logits");
    return id;
  }());
  value_info(og.add_output(), "logits", onnx::TensorProto::FLOAT, {B, S, std::to_string(cfg.vocab_size)});
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto li = static_cast<int64_t>(i);
    const std::string kv = std::to_string(layers[i].num_kv_heads), d = std::to_string(layers[i].head_dim);
    value_info(og.add_output(), L.present_key[li], onnx::TensorProto::FLOAT, {B, kv, T, d});
    value_info(og.add_output(), L.present_value[li], onnx::TensorProto::FLOAT, {B, kv, T, d});
  }

  // ── Stage 6: model fixes — rewrites of the final ONNX model that dodge runtime and opset gaps ──
  LOOM_ASSIGN_OR_RETURN(auto fixes, run_onnx_model_fixes(m, o.opset));
  for (const auto& [name, n] : fixes) r.model_fixes.push_back(name + ": " + std::to_string(n) + " changes");

  // ── Stage 7: optimize — trivial constant folding, dead nodes (per-architecture disable list) ──
  if (auto it = onnx_disable_optimize().find(cfg.model_type); it != onnx_disable_optimize().end())
    r.optimizer_disabled = cfg.model_type + ": " + it->second;
  else if (!o.optimize)
    r.optimizer_disabled = "--no-optimize";
  if (r.optimizer_disabled.empty()) {
    const OnnxOptimizeStats st = optimize_onnx(og);
    r.folded = st.folded;
    r.dead_removed = st.dead_removed;
  }
  r.nodes = og.node_size();
  r.initializers = og.initializer_size();
  r.contrib_fallbacks = L.fallbacks;
  for (const onnx::NodeProto& n : og.node())
    if (n.domain() == "com.microsoft" || n.op_type() == "SimplifiedLayerNormalization") ++r.contrib_ops[n.op_type()];

  // ── Stage 8: write — the .onnx file, large initializers as external data ──
  return write_model(m, path, o.external_data_threshold, r);
}

}  // namespace loom::exporting
