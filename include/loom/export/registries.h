// The exporters' registries, in one place like upstream's exporters/utils.py:
// workarounds a backend needs are registered here, keyed by backend name
// ("program", "onnx", "portable", …), and applied by the export pipeline at the
// lowest stage where they can be expressed — never by editing the model.
//
//   register_patch    replaces patch points (module methods, op builders; see
//                     graph/patch_point.h) for the duration of one export;
//   register_node_fix rewrites single nodes of the captured graph; for each node
//                     the first fix (in registration order) that applies consumes it;
//   register_program_fix rewrites the whole program (it sees the signature,
//                     dimension ranges and weights).
//
// Registration is meant for static initialisation or start-up; applying is
// thread-safe (patches are per thread).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <typeindex>
#include <vector>

#include "loom/core/status.h"
#include "loom/graph/graph.h"
#include "loom/graph/patch_point.h"

namespace loom::exporting {

struct ExportedProgram;

// ── patches ──
struct PatchEntry {
  std::string backend;
  std::string name;                // shown in the export summary
  std::vector<std::string> paths;  // several paths may share one factory
  std::type_index type{typeid(void)};
  // original std::function (type-erased) → replacement std::function of the same type.
  std::function<std::shared_ptr<const void>(const void* original)> make;
};

void add_patch(PatchEntry e);

// `factory(original)` returns the replacement of each path in `paths` for one export.
template <typename Sig, typename Factory>
void register_patch(const std::string& backend, const std::string& name, std::vector<std::string> paths,
                    Factory factory) {
  using Fn = std::function<Sig>;
  add_patch(PatchEntry{backend, name, std::move(paths), typeid(Fn), [factory](const void* original) {
                         return std::shared_ptr<const void>(std::make_shared<Fn>(factory(*static_cast<const Fn*>(original))));
                       }});
}

struct AppliedPatches {
  graph::PatchScope scope;            // the patches stay active while this lives
  std::vector<std::string> applied;   // "name: path"
  std::vector<std::string> skipped;   // paths that resolve to no patch point
};

// Installs every patch registered for `backend` on this thread. A path that
// resolves to no patch point is skipped with a warning, or fails in `strict`
// mode; a factory of the wrong signature always fails. Nothing stays installed
// when it fails.
Result<std::unique_ptr<AppliedPatches>> apply_patches(const std::string& backend, bool strict);

// ── node fixes ──
// Returns true when it rewrote (consumed) the node. It may add nodes and
// replace uses; dead nodes are removed and the order repaired after the pass.
using NodeFixFn = std::function<bool(graph::Graph&, graph::NodeId)>;

void register_node_fix(const std::string& backend, const std::string& op, const std::string& name, NodeFixFn fix);

struct FixReport {
  std::map<std::string, int> rewrites;  // fix name → nodes it rewrote
  int dead_nodes_removed = 0;
};

// One pass over the nodes present when it starts (nodes a fix adds are not
// revisited); fixes are looked up by op, so a pass is O(nodes).
FixReport run_node_fixes(const std::string& backend, graph::Graph& g);

// ── program fixes ──
using ProgramFixFn = std::function<Status(ExportedProgram&)>;

void register_program_fix(const std::string& backend, const std::string& name, ProgramFixFn fix);

// Runs every program fix of `backend` in registration order; the names of
// those run, or the first error (prefixed with the fix's name).
Result<std::vector<std::string>> run_program_fixes(const std::string& backend, ExportedProgram& program);

// Tests: what is registered for `backend` (names), and dropping a test's entries.
std::vector<std::string> registered_fixes(const std::string& backend);
void unregister_backend(const std::string& backend);

}  // namespace loom::exporting
