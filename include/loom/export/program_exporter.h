// The program exporter (torch.export's counterpart): captures a model's step
// graph with the "program" backend's patches active, applies its fixes, and
// produces an ExportedProgram — the graph with its weights, a flat signature,
// dimension constraints and metadata — that save_program writes and loom runs.
//
// The loom program keeps the KV cache as runtime state behind the attention op
// (the paged or contiguous cache the runner binds), described per layer in the
// metadata ("cache.layer.<i>": kv_heads, head_dim, window); the ONNX exporter
// is the one that flattens caches into past/present tensors.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/export/exported_program.h"
#include "loom/models/model.h"

namespace loom::exporting {

struct ProgramExportOptions {
  // true: every symbolic dimension stays dynamic, with the range in `ranges`
  // (default [1, max_position_embeddings] for tokens, [1, tokens' max] for
  // sequences). false: each is fixed to `static_sizes` (required for every one).
  bool dynamic = true;
  std::map<std::string, DimRange> ranges;
  std::map<std::string, int64_t> static_sizes;
  bool strict = false;  // a patch path that resolves to nothing is an error, not a warning
  std::string backend = "program";  // whose registered patches and fixes apply
};

struct ExportSummary {
  std::vector<std::string> patches_applied, patches_skipped;
  std::map<std::string, int> node_fix_rewrites;
  int dead_nodes_removed = 0;
  std::vector<std::string> program_fixes;
  std::vector<std::string> lines() const;  // for the CLI's report
};

Result<ExportedProgram> export_program(const models::Model& model, const ProgramExportOptions& options,
                                       ExportSummary* summary = nullptr);

// Replaces symbol `name` by the fixed size `n` in every value's shape (a static export).
Status fix_dimension(graph::Graph& g, const std::string& name, int64_t n);

}  // namespace loom::exporting
