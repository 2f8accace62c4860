// An ExportedProgram on disk: a directory with
//   program.json        format tag and version, the graph (graph_json.h), the flat
//                       signature, dynamic dimension ranges and metadata;
//   weights.safetensors every parameter ("param:<name>") and constant ("const:<name>");
//   config.json, generation_config.json, tokenizer.json, … the model's side files
//                       (ExportedProgram::files), so the folder runs like a checkpoint:
//                       `loom generate --model DIR`, Python loom.load_program(DIR).
// Loading maps the weights (zero-copy) and replays the graph through shape
// inference, so a file that does not describe a valid graph fails to load with
// an error naming the node or value.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/export/exported_program.h"
#include "loom/models/model.h"

namespace loom::exporting {

inline constexpr const char* kProgramFormat = "loom-program";
inline constexpr int kProgramFormatVersion = 1;

// Writes `dir` (created if missing; existing program files are replaced).
Status save_program(const ExportedProgram& program, const std::string& dir);
Result<ExportedProgram> load_program(const std::string& dir);

// The side files export_program copies from a checkpoint folder.
const std::vector<std::string>& program_side_files();
// Whether `dir` holds a program (program.json) rather than a checkpoint.
bool is_program_dir(const std::string& dir);
// A program as a model that runs (batching::ModelRunner): its graph and weights,
// with its config.json for the KV layout. Errors: those of load_program, a
// static program (fixed sizes: it cannot run a step of any other shape), no
// config.json, or a config.json that disagrees with the program's metadata.
Result<std::shared_ptr<models::Model>> load_program_model(const std::string& dir);

}  // namespace loom::exporting
