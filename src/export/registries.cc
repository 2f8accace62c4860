#include "loom/export/registries.h"

#include <mutex>
#include <unordered_map>

#include "loom/core/logging.h"

namespace loom::exporting {

namespace {

struct NodeFixEntry {
  std::string name;
  NodeFixFn fix;
};
struct ProgramFixEntry {
  std::string name;
  ProgramFixFn fix;
};

struct Registries {
  std::mutex mu;
  std::vector<PatchEntry> patches;
  // backend → op → fixes in registration order.
  std::unordered_map<std::string, std::unordered_map<std::string, std::vector<NodeFixEntry>>> node_fixes;
  std::unordered_map<std::string, std::vector<ProgramFixEntry>> program_fixes;
};

Registries& registries() {
  static Registries r;
  return r;
}

}  // namespace

void add_patch(PatchEntry e) {
  Registries& r = registries();
  std::lock_guard<std::mutex> lk(r.mu);
  r.patches.push_back(std::move(e));
}

Result<std::unique_ptr<AppliedPatches>> apply_patches(const std::string& backend, bool strict) {
  std::vector<PatchEntry> mine;
  {
    Registries& r = registries();
    std::lock_guard<std::mutex> lk(r.mu);
    for (const PatchEntry& e : r.patches)
      if (e.backend == backend) mine.push_back(e);
  }
  auto out = std::make_unique<AppliedPatches>();  // on an error return, its scope uninstalls what was installed
  for (const PatchEntry& e : mine) {
    for (const std::string& path : e.paths) {
      const graph::PatchRegistry::Entry* point = graph::PatchRegistry::global().find(path);
      if (!point) {
        if (strict)
          return not_found("export patch '" + e.name + "' (" + backend + "): '" + path +
                           "' resolves to no patch point (strict mode)");
        log_warn("export patch '" + e.name + "' (" + backend + "): '" + path + "' resolves to no patch point; skipped");
        out->skipped.push_back(path);
        continue;
      }
      if (point->type != e.type)
        return invalid_argument("export patch '" + e.name + "' (" + backend + "): its factory's signature differs from '" +
                                path + "'");
      LOOM_RETURN_IF_ERROR(out->scope.install_erased(path, e.make(point->original)));
      out->applied.push_back(e.name + ": " + path);
    }
  }
  return out;
}

void register_node_fix(const std::string& backend, const std::string& op, const std::string& name, NodeFixFn fix) {
  Registries& r = registries();
  std::lock_guard<std::mutex> lk(r.mu);
  r.node_fixes[backend][op].push_back({name, std::move(fix)});
}

FixReport run_node_fixes(const std::string& backend, graph::Graph& g) {
  std::unordered_map<std::string, std::vector<NodeFixEntry>> by_op;
  {
    Registries& r = registries();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.node_fixes.find(backend);
    if (it != r.node_fixes.end()) by_op = it->second;
  }
  FixReport report;
  if (by_op.empty()) return report;
  const size_t n = g.nodes().size();
  for (size_t i = 0; i < n; ++i) {
    auto it = by_op.find(g.node(static_cast<graph::NodeId>(i)).op);
    if (it == by_op.end()) continue;
    for (const NodeFixEntry& f : it->second) {
      if (!f.fix(g, static_cast<graph::NodeId>(i))) continue;
      ++report.rewrites[f.name];
      break;
    }
  }
  if (!report.rewrites.empty()) {
    g.sort_topologically();  // first: remove_dead_nodes walks the nodes in order
    report.dead_nodes_removed = g.remove_dead_nodes();
  }
  return report;
}

void register_program_fix(const std::string& backend, const std::string& name, ProgramFixFn fix) {
  Registries& r = registries();
  std::lock_guard<std::mutex> lk(r.mu);
  r.program_fixes[backend].push_back({name, std::move(fix)});
}

Result<std::vector<std::string>> run_program_fixes(const std::string& backend, ExportedProgram& program) {
  std::vector<ProgramFixEntry> mine;
  {
    Registries& r = registries();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.program_fixes.find(backend);
    if (it != r.program_fixes.end()) mine = it->second;
  }
  std::vector<std::string> ran;
  for (const ProgramFixEntry& f : mine) {
    Status s = f.fix(program);
    if (!s.ok()) return Status(s.code(), "program fix '" + f.name + "' (" + backend + "): " + s.message());
    ran.push_back(f.name);
  }
  return ran;
}

std::vector<std::string> registered_fixes(const std::string& backend) {
  Registries& r = registries();
  std::lock_guard<std::mutex> lk(r.mu);
  std::vector<std::string> names;
  for (const PatchEntry& e : r.patches)
    if (e.backend == backend) names.push_back("patch:" + e.name);
  if (auto it = r.node_fixes.find(backend); it != r.node_fixes.end())
    for (const auto& [op, fixes] : it->second)
      for (const NodeFixEntry& f : fixes) names.push_back("node:" + op + ":" + f.name);
  if (auto it = r.program_fixes.find(backend); it != r.program_fixes.end())
    for (const ProgramFixEntry& f : it->second) names.push_back("program:" + f.name);
  return names;
}

void unregister_backend(const std::string& backend) {
  Registries& r = registries();
  std::lock_guard<std::mutex> lk(r.mu);
  std::erase_if(r.patches, [&](const PatchEntry& e) { return e.backend == backend; });
  r.node_fixes.erase(backend);
  r.program_fixes.erase(backend);
}

}  // namespace loom::exporting
