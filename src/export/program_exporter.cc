#include "loom/export/program_exporter.h"

#include <filesystem>
#include <fstream>
#include <iterator>

#include "loom/export/program_io.h"
#include "loom/export/registries.h"

namespace loom::exporting {

std::vector<std::string> ExportSummary::lines() const {
  std::vector<std::string> out;
  out.push_back("patches applied: " + std::to_string(patches_applied.size()) +
                (patches_skipped.empty() ? "" : ", skipped (no such patch point): " + std::to_string(patches_skipped.size())));
  for (const std::string& p : patches_applied) out.push_back("  patch " + p);
  for (const std::string& p : patches_skipped) out.push_back("  skipped " + p);
  for (const auto& [name, n] : node_fix_rewrites) out.push_back("node fix " + name + ": " + std::to_string(n) + " nodes rewritten");
  if (dead_nodes_removed > 0) out.push_back("dead nodes removed: " + std::to_string(dead_nodes_removed));
  for (const std::string& f : program_fixes) out.push_back("program fix " + f);
  return out;
}

Status fix_dimension(graph::Graph& g, const std::string& name, int64_t n) {
  const int sym = g.symbol(name);
  if (sym < 0) return invalid_argument("no dimension named '" + name + "' in the graph");
  if (n < 1) return invalid_argument("dimension '" + name + "' must be ≥ 1, got " + std::to_string(n));
  for (const graph::Value& v : g.values()) {
    graph::Value& w = g.mutable_value(v.id);
    for (graph::Dim& d : w.shape)
      if (!d.is_static() && d.symbol == sym) d = graph::Dim::fixed(n);
  }
  return Status::Ok();
}

Result<ExportedProgram> export_program(const models::Model& model, const ProgramExportOptions& o, ExportSummary* summary) {
  ExportSummary local;
  ExportSummary& s = summary ? *summary : local;
  ExportedProgram p;
  const ModelConfig& cfg = model.config();

  // ── Stage 1: capture — record the step graph with the backend's patches active ──
  {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<AppliedPatches> patches, apply_patches(o.backend, o.strict));
    s.patches_applied = patches->applied;
    s.patches_skipped = patches->skipped;
    const auto& params = model.parameters();
    try {
      p.graph = model.module().build_graph([&](const std::string& name) {
        auto it = params.find(name);
        if (it == params.end()) throw Error(not_found("export: the model has no parameter '" + name + "'"));
        return it->second;
      }, model.kernel_plan());  // a model loaded with a KernelConfig records its kernels
    } catch (const Error& e) {
      return Status(e.status().code(), "export capture: " + e.status().message());
    }
  }  // patches restored here, whatever happened above

  // ── Stage 2: node fixes — per-node rewrites registered for the backend ──
  const FixReport fixes = run_node_fixes(o.backend, p.graph);
  s.node_fix_rewrites = fixes.rewrites;
  s.dead_nodes_removed = fixes.dead_nodes_removed;

  // ── Stage 3: signature — flat named inputs and outputs, dimension constraints ──
  for (graph::ValueId v : p.graph.inputs()) p.input_names.push_back(p.graph.value(v).name);
  for (const auto& [name, v] : p.graph.outputs()) p.output_names.push_back(name);
  const int64_t max_tokens = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 0;
  for (const std::string& sym : p.graph.symbols()) {
    if (o.dynamic) {
      DimRange r{1, max_tokens};
      if (auto it = o.ranges.find(sym); it != o.ranges.end()) r = it->second;
      if (r.min < 1 || (r.max != 0 && r.max < r.min))
        return invalid_argument("export: dimension '" + sym + "' has an empty range [" + std::to_string(r.min) + ", " +
                                std::to_string(r.max) + "]");
      p.dims[sym] = r;
    } else {
      auto it = o.static_sizes.find(sym);
      if (it == o.static_sizes.end())
        return invalid_argument("export: a static export needs a size for dimension '" + sym + "'");
      LOOM_RETURN_IF_ERROR(fix_dimension(p.graph, sym, it->second));
    }
  }
  for (const auto& [name, r] : o.ranges)
    if (p.graph.symbol(name) < 0) return invalid_argument("export: no dimension named '" + name + "' in the graph");
  for (const auto& [name, n] : o.static_sizes)
    if (p.graph.symbol(name) < 0) return invalid_argument("export: no dimension named '" + name + "' in the graph");

  // ── Stage 4: program fixes — whole-program rewrites (signature, ranges, weights) ──
  LOOM_ASSIGN_OR_RETURN(s.program_fixes, run_program_fixes(o.backend, p));

  // ── Stage 5: metadata — what a consumer needs to drive the program ──
  p.metadata["loom_version"] = LOOM_VERSION;
  p.metadata["model_type"] = cfg.model_type;
  p.metadata["vocab_size"] = std::to_string(cfg.vocab_size);
  p.metadata["num_layers"] = std::to_string(cfg.num_hidden_layers);
  p.metadata["dynamic"] = o.dynamic ? "true" : "false";
  std::map<std::string, int> dtypes;
  for (graph::ValueId v : p.graph.parameters()) ++dtypes[std::string(dtype_name(p.graph.value(v).dtype))];
  std::string dt;
  for (const auto& [name, n] : dtypes) dt += (dt.empty() ? "" : ",") + name + ":" + std::to_string(n);
  p.metadata["parameter_dtypes"] = dt;
  const auto& layers = model.module().settings().layers;
  for (size_t i = 0; i < layers.size(); ++i)
    p.metadata["cache.layer." + std::to_string(i)] = "kv_heads=" + std::to_string(layers[i].num_kv_heads) +
                                                     ",head_dim=" + std::to_string(layers[i].head_dim) +
                                                     ",window=" + std::to_string(layers[i].sliding_window);
  // The checkpoint's side files travel with the program; a GGUF file has none,
  // so its config (as read from the GGUF metadata) is written instead.
  namespace fs = std::filesystem;
  if (fs::is_directory(model.dir())) {
    for (const std::string& name : program_side_files()) {
      std::ifstream in(fs::path(model.dir()) / name, std::ios::binary);
      if (in) p.files[name] = std::string(std::istreambuf_iterator<char>(in), {});
    }
  } else {
    p.files["config.json"] = cfg.raw.dump(2);
  }
  return p;
}

}  // namespace loom::exporting
