// The portable exporter: program capture → static sizes → lowering → backend
// preparation → memory planning → flatbuffers. See docs/exporters.md.
#include "loom/export/portable_exporter.h"

#include "export/quantized_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "loom/models/decoder.h"
#include "loom_program_generated.h"
#include "lpte_weights_file.h"
#include "onnx_rope_tables.h"

namespace loom::exporting {
namespace {

namespace fb = loom::portable::fb;

const std::map<std::string, fb::OpCode>& op_codes() {
  static const std::map<std::string, fb::OpCode> m = {
      {"embedding", fb::OpCode_Embedding}, {"linear", fb::OpCode_Linear},         {"rms_norm", fb::OpCode_RmsNorm},
      {"layer_norm", fb::OpCode_LayerNorm}, {"add", fb::OpCode_Add},              {"mul", fb::OpCode_Mul},
      {"silu", fb::OpCode_Silu},           {"gelu", fb::OpCode_GeluErf},          {"scale", fb::OpCode_Scale},
      {"softcap", fb::OpCode_Softcap},     {"rope", fb::OpCode_Rope},             {"attention", fb::OpCode_Attention},
      {"gather_rows", fb::OpCode_GatherRows}, {"silu_and_mul", fb::OpCode_SiluAndMul},
      {"split_columns", fb::OpCode_SplitColumns}, {"moe", fb::OpCode_Moe}};
  return m;
}

// Lowering state: graph values → program tensors.
struct Lowering {
  const graph::Graph& g;
  PortableProgram& p;
  int tokens_sym, sequences_sym;
  bool static_rows;
  std::set<graph::ValueId> bf16_ok = {};  // bf16 weights read only by kernels that widen them
  std::map<graph::ValueId, int> tensor_of = {};
  std::map<std::string, int> weight_by_name = {};
  std::map<std::string, std::pair<int, int>> rope_tables_by_key = {};  // attrs → (cos, sin) tensors

  Result<PortableRows> rows_kind(const graph::Dim& d, int64_t* rows) const {
    if (d.is_static()) {
      *rows = d.value;
      return PortableRows::kFixed;
    }
    if (static_rows && (d.symbol == tokens_sym || d.symbol == sequences_sym)) {
      *rows = p.max_tokens;  // static: both fixed to the chunk size (the selected rows may repeat)
      return PortableRows::kFixed;
    }
    if (d.symbol == tokens_sym) return PortableRows::kTokens;
    if (d.symbol == sequences_sym) return PortableRows::kSelected;
    return unsupported("portable export: dimension '" + g.symbols().at(static_cast<size_t>(d.symbol)) +
                       "' is neither tokens nor sequences");
  }

  int add_weight(const std::string& name, std::vector<float> data, int64_t rows, int64_t cols,
                 std::vector<uint16_t> bf16 = {}) {
    if (auto it = weight_by_name.find(name); it != weight_by_name.end()) return it->second;
    PortableTensor t;
    t.name = name;
    t.is_weight = true;
    t.is_bf16 = !bf16.empty();
    t.rows = rows;
    t.cols = cols;
    t.weight = static_cast<int>(p.weights.size());
    p.weights.push_back({name, std::move(data), std::move(bf16)});
    p.tensors.push_back(t);
    return weight_by_name[name] = static_cast<int>(p.tensors.size()) - 1;
  }

  Result<int> tensor(graph::ValueId v) {
    if (v == graph::kNoValue) return -1;
    if (auto it = tensor_of.find(v); it != tensor_of.end()) return it->second;
    const graph::Value& val = g.value(v);
    if (val.kind == graph::ValueKind::kParameter || val.kind == graph::ValueKind::kConstant) {
      const Tensor& w = val.tensor;
      if (!w.defined() || w.rank() < 1 || w.rank() > 3 || !(dtype_is_float(w.dtype()) || dtype_is_quantized(w.dtype())))
        return unsupported("portable export: weight '" + val.name + "' must be a float tensor of rank 1, 2 or 3");
      // Rank 3 (a moe's stacked experts [E, R, C]) is stored as [E·R, C]; the
      // op reads expert e at rows e·R.
      const int64_t cols = w.dim(w.rank() - 1), rows = w.numel() / std::max<int64_t>(cols, 1);
      const std::string name = val.name.empty() ? "const." + std::to_string(v) : val.name;
      if (w.dtype() == DType::kBF16 && w.rank() >= 2 && bf16_ok.count(v)) {
        const uint16_t* d = w.data_as<uint16_t>();
        return tensor_of[v] = add_weight(name, {}, rows, cols, std::vector<uint16_t>(d, d + w.numel()));
      }
      return tensor_of[v] = add_weight(name, w.to_f32_vector(), rows, cols);
    }
    PortableTensor t;
    t.name = val.name.empty() ? "v" + std::to_string(v) : val.name;
    t.is_i32 = val.dtype == DType::kI32;
    if (val.dtype != DType::kI32 && val.dtype != DType::kF32)
      return unsupported("portable export: value '" + t.name + "' has dtype " + std::string(dtype_name(val.dtype)));
    if (val.shape.empty() || val.shape.size() > 2)
      return unsupported("portable export: value '" + t.name + "' must have rank 1 or 2");
    LOOM_ASSIGN_OR_RETURN(t.row_kind, rows_kind(val.shape[0], &t.rows));
    if (val.shape.size() == 2) {
      if (!val.shape[1].is_static()) return unsupported("portable export: value '" + t.name + "' has a dynamic row size");
      t.cols = val.shape[1].value;
    }
    p.tensors.push_back(t);
    return tensor_of[v] = static_cast<int>(p.tensors.size()) - 1;
  }

  // The rope node's cos/sin tables ([max_positions, rotary_dim / 2], × attention
  // scaling), shared by every rope node with the same attributes.
  Result<std::pair<int, int>> rope(const graph::Node& n) {
    std::string key;
    for (const auto& [k, v] : n.attrs) {
      if (k == "num_heads") continue;  // q and k share the tables
      key += k + "=";
      std::visit([&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::string>) key += x;
        else if constexpr (std::is_arithmetic_v<T>) key += std::to_string(x);
        else for (auto e : x) key += std::to_string(e) + ",";
      }, v);
      key += ";";
    }
    if (auto it = rope_tables_by_key.find(key); it != rope_tables_by_key.end()) return it->second;
    LOOM_ASSIGN_OR_RETURN(RopeTables t, rope_tables(n, p.max_positions));
    const std::string base = "rope." + std::to_string(rope_tables_by_key.size());
    const int c = add_weight(base + ".cos", std::move(t.cos), t.positions, t.half);
    const int s = add_weight(base + ".sin", std::move(t.sin), t.positions, t.half);
    return rope_tables_by_key[key] = {c, s};
  }
};

}  // namespace

std::vector<std::string> PortableExportReport::lines() const {
  std::vector<std::string> out = capture.lines();
  std::string ops;
  for (const auto& [op, n] : lowered) ops += (ops.empty() ? "" : ", ") + op + "×" + std::to_string(n);
  out.push_back("lowered: " + ops);
  out.push_back("memory plan: arena " + std::to_string(arena_bytes) + " bytes (" + std::to_string(unplanned_bytes) +
                " without reuse), KV state " + std::to_string(state_bytes) + " bytes");
  if (program_bytes) out.push_back("program: " + std::to_string(program_bytes) + " bytes (weights " + std::to_string(weight_bytes) + ")");
  if (!weights_file.empty())
    out.push_back("weights file: " + weights_file + ", " + std::to_string(weights_file_bytes) + " bytes (" +
                  std::to_string(external_weights) + " weights, mapped read-only by the runtime)");
  return out;
}

Result<PortableProgram> lower_portable(const models::Model& model, const PortableExportOptions& o, PortableExportReport* report) {
  PortableExportReport local;
  PortableExportReport& r = report ? *report : local;
  const ModelConfig& cfg = model.config();
  exporters::note_dequantized_weights(model, "portable export");
  if (o.max_tokens < 1) return invalid_argument("portable export: max_tokens must be ≥ 1");
  if (const std::string why = portable_export_skip_reason(cfg.model_type); !why.empty())
    return unsupported("portable export: " + cfg.model_type + " is on the portable skip list: " + why);
  PortableProgram p;
  p.max_tokens = o.max_tokens;
  p.max_positions = o.max_positions > 0 ? o.max_positions
                                        : std::min<int64_t>(cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 4096, 4096);
  p.vocab_size = cfg.vocab_size;
  p.model_type = cfg.model_type;
  p.static_rows = !o.dynamic;

  // ── Stage 1: capture — the program exporter with the "portable" backend's patches and fixes ──
  // Tokens stay symbolic (a chunk runs 1..max_tokens of them), so the plan
  // holds for every chunk size; everything else is fixed here or below.
  ProgramExportOptions po;
  po.backend = "portable";
  po.strict = o.strict;
  po.dynamic = true;
  po.ranges[models::step_io::kTokens] = {1, o.max_tokens};
  po.ranges[models::step_io::kSequences] = {1, o.max_tokens};
  LOOM_ASSIGN_OR_RETURN(ExportedProgram ep, export_program(model, po, &r.capture));
  const graph::Graph& g = ep.graph;

  // ── Stage 2: static sizes — batch 1, max_tokens per chunk, max_positions of KV cache ──
  // One sequence: its tokens are the chunk's rows, and the rows whose logits
  // are wanted ("sequences" in loom's step graph) are chosen per run. A static
  // program fixes both row counts to max_tokens (lowering below).
  for (const std::string& sym : g.symbols())
    if (sym != models::step_io::kTokens && sym != models::step_io::kSequences)
      return unsupported("portable export: the graph has a dimension '" + sym + "' the portable runtime cannot size");
  for (const std::string& in : ep.input_names)
    if (in != models::step_io::kInputIds && in != models::step_io::kPositions && in != models::step_io::kLogitsIndices)
      return unsupported("portable export: unknown graph input '" + in + "'");

  // ── Stage 3: lowering — ops over numbered tensors, f32 weights, rotary tables, KV state ──
  Lowering L{g, p, g.symbol(models::step_io::kTokens), g.symbol(models::step_io::kSequences), p.static_rows};
  if (o.keep_bf16) {
    // A weight may stay bf16 when every reader widens it itself: a linear's
    // weight (input 1), an embedding's table (input 0), a moe's router and
    // expert matrices (inputs 1-3); any other use (norm weights, biases, the
    // shared expert's gate vector, …) keeps it f32.
    std::set<graph::ValueId> other_use;
    for (const graph::Node& n : g.nodes())
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        const bool widened = (n.op == "linear" && i == 1) || (n.op == "embedding" && i == 0) ||
                             (n.op == "moe" && i >= 1 && i <= 3);
        (widened ? L.bf16_ok : other_use).insert(n.inputs[i]);
      }
    for (graph::ValueId v : other_use) L.bf16_ok.erase(v);
  }
  for (graph::ValueId v : g.inputs()) {
    LOOM_ASSIGN_OR_RETURN(int t, L.tensor(v));
    p.inputs[g.value(v).name] = t;
  }
  const graph::ValueId positions = g.input(models::step_io::kPositions);
  std::map<int, int64_t> kv_rows;
  for (const graph::Node& n : g.nodes()) {
    if (n.op == "all_reduce" || n.op == "all_gather")
      return unsupported("portable export: " + n.op + " (" + n.scope + "): this graph is one rank's shard of a tensor-parallel model (" +
                         std::to_string(n.attr_int("parts", 0)) + " ranks); export the whole model, without --tensor-parallel");
    if (!op_codes().count(n.op))
      return unsupported("portable export: op '" + n.op + "' (" + n.scope + ") has no portable kernel");
    PortableOp op;
    op.op = n.op;
    op.scope = n.scope;
    for (graph::ValueId v : n.inputs) {
      LOOM_ASSIGN_OR_RETURN(int t, L.tensor(v));
      op.inputs.push_back(t);
    }
    for (graph::ValueId v : n.outputs) {
      LOOM_ASSIGN_OR_RETURN(int t, L.tensor(v));
      op.outputs.push_back(t);
    }
    if (n.op == "rms_norm") {
      op.eps = n.attr_float("eps");
      op.weight_offset = n.attr_float("weight_offset", 0.0);
    } else if (n.op == "layer_norm") {
      op.eps = n.attr_float("eps");
    } else if (n.op == "gelu") {
      const std::string a = n.attr_str("approximate", "none");
      if (a != "none" && a != "tanh") return unsupported("portable export: gelu approximate='" + a + "' (" + n.scope + ")");
      op.gelu_tanh = a == "tanh";
    } else if (n.op == "scale") {
      op.factor = n.attr_float("factor");
    } else if (n.op == "softcap") {
      op.cap = n.attr_float("cap");
    } else if (n.op == "split_columns") {
      op.sizes = n.attr_ints("sizes");
    } else if (n.op == "rope") {
      op.num_heads = static_cast<int>(n.attr_int("num_heads"));
      op.head_dim = static_cast<int>(n.attr_int("head_dim"));
      op.rotary_dim = static_cast<int>(n.attr_int("rotary_dim"));
      if (n.attr_str("rope_type", "default") == "dynamic") {
        // NTK-dynamic: the frequencies depend on the sequence length, known
        // only at run time; the runtime computes them (the op's own attributes).
        op.rope_dynamic = true;
        op.theta = n.attr_float("theta");
        op.factor = n.attr_float("factor", 0.0);
        op.max_position_embeddings = n.attr_int("max_position_embeddings", 0);
        if (op.max_position_embeddings < 1) op.max_position_embeddings = cfg.max_position_embeddings;
        if (op.rotary_dim < 4 || op.rotary_dim % 2 || !(op.theta > 0) || !std::isfinite(op.theta) || !(op.factor > 0) ||
            !std::isfinite(op.factor) || op.max_position_embeddings < 1)
          return invalid_argument("portable export: rope 'dynamic' (" + n.scope +
                                  ") needs an even rotary_dim ≥ 4, a positive theta and factor, and max_position_embeddings");
        ++r.lowered[n.op];
        p.ops.push_back(std::move(op));
        continue;
      }
      auto tables = L.rope(n);
      if (!tables.ok()) return Status(tables.status().code(), "portable export: " + tables.status().message());
      op.inputs.push_back(tables.value().first);
      op.inputs.push_back(tables.value().second);
    } else if (n.op == "attention") {
      if (n.inputs.size() > 3 && n.inputs[3] != graph::kNoValue)
        return unsupported("portable export: attention with sinks (" + n.scope + ") has no portable kernel");
      op.layer = static_cast<int>(n.attr_int("layer"));
      op.num_heads = static_cast<int>(n.attr_int("num_q_heads"));
      op.num_kv_heads = static_cast<int>(n.attr_int("num_kv_heads"));
      op.head_dim = static_cast<int>(n.attr_int("head_dim"));
      op.scale = n.attr_float("scale");
      op.sliding_window = n.attr_int("sliding_window", 0);
      op.softcap = n.attr_float("softcap", 0.0);
      op.inputs.push_back(L.tensor_of.at(positions));  // where this chunk's K/V go
      const int64_t row = int64_t{op.num_kv_heads} * op.head_dim;
      if (auto it = kv_rows.find(op.layer); it != kv_rows.end() && it->second != row)
        return unsupported("portable export: two attention ops share layer " + std::to_string(op.layer) + " with different K/V rows");
      kv_rows[op.layer] = row;
    } else if (n.op == "moe") {
      // loom's attributes as its kernel reads them (runtime/moe_kernel.cc).
      op.top_k = n.attr_int("top_k");
      op.norm_topk_prob = n.attr_int("norm_topk_prob") != 0;
      const std::string act = n.attr_str("activation", "silu");
      if (act == "silu" || act == "swish") op.activation = "silu";
      else if (act == "gelu") op.activation = "gelu";
      else if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast") op.activation = "gelu_tanh";
      else
        return unsupported("portable export: moe activation '" + act + "' (" + n.scope +
                           ") has no portable kernel (silu, swish, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)");
      const int64_t experts = g.value(n.inputs[1]).shape[0].value;
      if (op.top_k < 1 || op.top_k > experts)
        return invalid_argument("portable export: moe top_k " + std::to_string(op.top_k) + " outside [1, " +
                                std::to_string(experts) + "] (" + n.scope + ")");
      if (n.attr_str("routing", "softmax_topk") != "softmax_topk" || n.attr_float("swiglu_limit", 0.0) > 0 ||
          op.inputs.size() > 6)
        return unsupported("portable export: moe (" + n.scope + ") with gpt-oss's routing, clamped SwiGLU or biases "
                           "has no portable kernel");
      if (op.inputs.size() > 4 && (op.inputs.size() != 6 || (op.inputs[4] < 0) != (op.inputs[5] < 0)))
        return invalid_argument("portable export: moe (" + n.scope + ") has a shared expert without its gate, or the reverse");
    }
    ++r.lowered[n.op];
    p.ops.push_back(std::move(op));
  }
  for (const auto& [name, v] : g.outputs()) {
    LOOM_ASSIGN_OR_RETURN(int t, L.tensor(v));
    p.outputs[name] = t;
  }
  if (!p.outputs.count(models::step_io::kLogits)) return unsupported("portable export: the graph has no 'logits' output");
  const int layers = kv_rows.empty() ? 0 : kv_rows.rbegin()->first + 1;
  for (int l = 0; l < layers; ++l) {
    PortableKvLayer kv;
    kv.kv_row = kv_rows.count(l) ? kv_rows[l] : 0;
    kv.k_offset = p.state_floats;
    kv.v_offset = p.state_floats + static_cast<uint64_t>(kv.kv_row * p.max_positions);
    p.state_floats = kv.v_offset + static_cast<uint64_t>(kv.kv_row * p.max_positions);
    p.kv_layers.push_back(kv);
  }
  p.metadata = ep.metadata;
  p.metadata.erase("dynamic");  // the sizes are the two below
  p.metadata["max_tokens"] = std::to_string(p.max_tokens);
  p.metadata["max_positions"] = std::to_string(p.max_positions);

  // ── Stage 4: backend preparation — prepare_for_<backend> (registered per name) ──
  LOOM_RETURN_IF_ERROR(prepare_for_backend(o.backend, p));

  // ── Stage 5: memory planning — one arena, an offset per activation, liveness-based reuse ──
  LOOM_RETURN_IF_ERROR(plan_memory(p));
  r.arena_bytes = p.arena_bytes;
  r.unplanned_bytes = p.unplanned_bytes;
  r.state_bytes = p.state_floats * 4;
  r.weight_bytes = 0;
  for (const auto& w : p.weights) r.weight_bytes += w.bytes();
  return p;
}

namespace {

// Where one weight's bytes go: inline (external_bytes == 0) or in the sidecar.
struct WeightPlacement {
  uint64_t offset = 0, bytes = 0;
};

struct WeightsFileInfo {
  std::string name;  // relative to the program's folder
  uint64_t bytes = 0, hash = 0;
};

// The flatbuffer (src/portable/schema/loom_program.fbs), weights inline or referenced in the sidecar.
Result<std::vector<uint8_t>> build_flatbuffer(const PortableProgram& p, const std::vector<WeightPlacement>& placed,
                                              const WeightsFileInfo* file) {
  size_t inline_bytes = 0;
  for (size_t i = 0; i < p.weights.size(); ++i)
    if (placed[i].bytes == 0) inline_bytes += p.weights[i].bytes();
  if (inline_bytes > (size_t{1} << 31) - (size_t{64} << 20))
    return unsupported("portable export: " + std::to_string(inline_bytes) +
                       " bytes of inline weights exceed what one flatbuffer holds (2 GiB); store them in the "
                       "weights file (external_weights_threshold ≥ 0, --external-data-threshold)");
  flatbuffers::FlatBufferBuilder b(inline_bytes + (1 << 20));
  std::vector<flatbuffers::Offset<fb::WeightData>> weights;
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const PortableProgram::Weight& w = p.weights[i];
    const auto n = b.CreateString(w.name);
    const fb::ElemType type = w.bf16.empty() ? fb::ElemType_F32 : fb::ElemType_BF16;
    if (placed[i].bytes == 0 && w.bf16.empty())
      weights.push_back(fb::CreateWeightData(b, n, b.CreateVector(w.f32)));
    else if (placed[i].bytes == 0)
      weights.push_back(fb::CreateWeightData(b, n, 0, 0, 0, type, b.CreateVector(w.bf16)));
    else
      weights.push_back(fb::CreateWeightData(b, n, 0, placed[i].offset, placed[i].bytes, type));
  }
  std::vector<flatbuffers::Offset<fb::Tensor>> tensors;
  for (const PortableTensor& t : p.tensors)
    tensors.push_back(fb::CreateTensor(b, b.CreateString(t.name), t.is_weight ? fb::TensorKind_Weight : fb::TensorKind_Arena,
                                       t.is_i32 ? fb::ElemType_I32 : t.is_bf16 ? fb::ElemType_BF16 : fb::ElemType_F32, static_cast<fb::RowKind>(t.row_kind),
                                       t.rows, t.cols, t.offset, t.weight));
  std::vector<flatbuffers::Offset<fb::Op>> ops;
  for (const PortableOp& op : p.ops) {
    fb::OpCode code = op_codes().at(op.op);
    if (op.op == "gelu" && op.gelu_tanh) code = fb::OpCode_GeluTanh;
    const fb::Activation act = op.activation == "gelu" ? fb::Activation_GeluErf
                               : op.activation == "gelu_tanh" ? fb::Activation_GeluTanh
                                                              : fb::Activation_Silu;
    ops.push_back(fb::CreateOp(b, code, b.CreateVector(op.inputs), b.CreateVector(op.outputs), b.CreateString(op.scope), op.eps,
                               op.weight_offset, op.factor, op.cap, op.scale, op.softcap, op.layer, op.num_heads,
                               op.num_kv_heads, op.head_dim, op.rotary_dim, op.sliding_window,
                               op.sizes.empty() ? 0 : b.CreateVector(op.sizes), op.rope_dynamic, op.theta,
                               op.max_position_embeddings, static_cast<int32_t>(op.top_k), op.norm_topk_prob, act));
  }
  std::vector<flatbuffers::Offset<fb::KvLayer>> kv;
  for (const PortableKvLayer& l : p.kv_layers) kv.push_back(fb::CreateKvLayer(b, l.kv_row, l.k_offset, l.v_offset));
  auto bindings = [&](const std::map<std::string, int>& m) {
    std::vector<flatbuffers::Offset<fb::Binding>> v;
    for (const auto& [name, t] : m) v.push_back(fb::CreateBinding(b, b.CreateString(name), t));
    return b.CreateVector(v);
  };
  const auto inputs = bindings(p.inputs), outputs = bindings(p.outputs);
  std::vector<flatbuffers::Offset<fb::KeyValue>> meta;
  for (const auto& [k, v] : p.metadata) meta.push_back(fb::CreateKeyValue(b, b.CreateString(k), b.CreateString(v)));
  const auto wf = file ? fb::CreateWeightsFile(b, b.CreateString(file->name), file->bytes, file->hash) : 0;
  const auto root = fb::CreateProgram(b, 2, b.CreateString(p.backend), b.CreateString(p.model_type), p.vocab_size, p.max_tokens,
                                      p.max_positions, p.arena_bytes, p.unplanned_bytes, p.state_floats, b.CreateVector(tensors),
                                      b.CreateVector(weights), b.CreateVector(ops), b.CreateVector(kv), inputs, outputs,
                                      b.CreateVector(meta), wf, p.static_rows);
  fb::FinishProgramBuffer(b, root);
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

}  // namespace

Result<std::vector<uint8_t>> serialize_portable(const PortableProgram& p) {
  return build_flatbuffer(p, std::vector<WeightPlacement>(p.weights.size()), nullptr);
}

Status write_portable(const PortableProgram& p, const std::string& path, int64_t threshold, PortableExportReport* report) {
  PortableExportReport local;
  PortableExportReport& r = report ? *report : local;
  std::vector<WeightPlacement> placed(p.weights.size());
  uint64_t payload = 0;
  for (size_t i = 0; i < p.weights.size(); ++i) {
    const uint64_t bytes = p.weights[i].bytes();
    if (threshold < 0 || bytes == 0 || bytes < static_cast<uint64_t>(threshold)) continue;
    placed[i] = {payload, bytes};
    payload = (payload + bytes + lpte::kWeightsAlignment - 1) / lpte::kWeightsAlignment * lpte::kWeightsAlignment;
    ++r.external_weights;
  }
  const std::string weights_path = path + ".weights";
  std::error_code ec;
  std::filesystem::remove(weights_path, ec);  // a stale sidecar from an earlier export must not linger
  WeightsFileInfo info;
  if (r.external_weights > 0) {
    // The sidecar: header, then each weight at its 64-byte aligned offset.
    std::ofstream f(weights_path, std::ios::binary | std::ios::trunc);
    if (!f) return invalid_argument("portable export: cannot write " + weights_path);
    lpte::WeightsHeader h{};
    f.write(reinterpret_cast<const char*>(&h), sizeof h);  // rewritten with the hash below
    lpte::PayloadHash hash;
    static const char zeros[lpte::kWeightsAlignment] = {};
    uint64_t at = 0;
    for (size_t i = 0; i < p.weights.size(); ++i) {
      if (placed[i].bytes == 0) continue;
      const PortableProgram::Weight& w = p.weights[i];
      const char* data = w.bf16.empty() ? reinterpret_cast<const char*>(w.f32.data()) : reinterpret_cast<const char*>(w.bf16.data());
      f.write(data, static_cast<std::streamsize>(placed[i].bytes));
      hash.update(data, placed[i].bytes);
      at += placed[i].bytes;
      const uint64_t pad = (lpte::kWeightsAlignment - at % lpte::kWeightsAlignment) % lpte::kWeightsAlignment;
      f.write(zeros, static_cast<std::streamsize>(pad));
      hash.update(zeros, pad);
      at += pad;
    }
    std::memcpy(h.magic, lpte::kWeightsMagic, sizeof h.magic);
    h.payload_offset = lpte::kWeightsHeaderBytes;
    h.payload_bytes = at;
    h.payload_hash = hash.digest();
    f.seekp(0);
    f.write(reinterpret_cast<const char*>(&h), sizeof h);
    f.close();
    if (!f.good()) return internal_error("portable export: writing " + weights_path + " failed");
    info.name = std::filesystem::path(weights_path).filename().string();
    info.bytes = lpte::kWeightsHeaderBytes + at;
    info.hash = h.payload_hash;
    r.weights_file = weights_path;
    r.weights_file_bytes = info.bytes;
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, build_flatbuffer(p, placed, r.external_weights ? &info : nullptr));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return invalid_argument("portable export: cannot write " + path);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!f.good()) return internal_error("portable export: writing " + path + " failed");
  r.program_bytes = bytes.size();
  return Status::Ok();
}

Status export_portable(const models::Model& model, const std::string& path, const PortableExportOptions& o,
                       PortableExportReport* report) {
  PortableExportReport local;
  PortableExportReport& r = report ? *report : local;
  LOOM_ASSIGN_OR_RETURN(PortableProgram p, lower_portable(model, o, &r));
  // ── Stage 6: serialization — flatbuffers to .lpte, large weights to the mapped sidecar .lpte.weights ──
  return write_portable(p, path, o.external_weights_threshold, &r);
}

}  // namespace loom::exporting
