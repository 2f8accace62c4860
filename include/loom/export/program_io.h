// An ExportedProgram on disk: a directory with
//   program.json        format tag and version, the graph (graph_json.h), the flat
//                       signature, dynamic dimension ranges and metadata;
//   weights.safetensors every parameter ("param:<name>") and constant ("const:<name>").
// Loading maps the weights (zero-copy) and replays the graph through shape
// inference, so a file that does not describe a valid graph fails to load with
// an error naming the node or value.
#pragma once

#include <string>

#include "loom/core/status.h"
#include "loom/export/exported_program.h"

namespace loom::exporting {

inline constexpr const char* kProgramFormat = "loom-program";
inline constexpr int kProgramFormatVersion = 1;

// Writes `dir` (created if missing; existing program files are replaced).
Status save_program(const ExportedProgram& program, const std::string& dir);
Result<ExportedProgram> load_program(const std::string& dir);

}  // namespace loom::exporting
