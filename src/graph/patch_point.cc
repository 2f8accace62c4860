#include "loom/graph/patch_point.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

namespace loom::graph {

namespace {
std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

// path → replacements, innermost last. Per thread: an export patches only its own thread.
thread_local std::unordered_map<std::string, std::vector<const void*>> t_active;
}  // namespace

PatchRegistry& PatchRegistry::global() {
  static PatchRegistry r;
  return r;
}

void PatchRegistry::add(Entry e) {
  std::lock_guard<std::mutex> lk(registry_mutex());
  for (const Entry& x : entries_)
    if (x.path == e.path) throw Error(internal_error("patch point '" + e.path + "' is registered twice"));
  entries_.push_back(std::move(e));
}

const PatchRegistry::Entry* PatchRegistry::find(const std::string& path) const {
  std::lock_guard<std::mutex> lk(registry_mutex());
  for (const Entry& x : entries_)
    if (x.path == path) return &x;
  return nullptr;
}

std::vector<std::string> PatchRegistry::paths() const {
  std::lock_guard<std::mutex> lk(registry_mutex());
  std::vector<std::string> out;
  for (const Entry& x : entries_) out.push_back(x.path);
  return out;
}

const void* detail::active_patch(const std::string& path) {
  if (t_active.empty()) return nullptr;  // the common case: no export running on this thread
  auto it = t_active.find(path);
  return it == t_active.end() || it->second.empty() ? nullptr : it->second.back();
}

Status PatchScope::install_erased(const std::string& path, std::shared_ptr<const void> replacement) {
  if (!PatchRegistry::global().find(path)) return not_found("patch point '" + path + "' does not exist");
  t_active[path].push_back(replacement.get());
  paths_.push_back(path);
  fns_.push_back(std::move(replacement));
  return Status::Ok();
}

PatchScope::PatchScope(PatchScope&& o) noexcept : paths_(std::move(o.paths_)), fns_(std::move(o.fns_)) {
  o.paths_.clear();
  o.fns_.clear();
}

PatchScope::~PatchScope() {
  // Remove exactly what this scope installed, newest first, wherever it sits in
  // the stack (scopes may end out of order when moved).
  for (size_t i = paths_.size(); i-- > 0;) {
    auto it = t_active.find(paths_[i]);
    if (it == t_active.end()) continue;
    auto& stack = it->second;
    auto pos = std::find(stack.rbegin(), stack.rend(), fns_[i].get());
    if (pos != stack.rend()) stack.erase(std::next(pos).base());
    if (stack.empty()) t_active.erase(it);
  }
}

}  // namespace loom::graph
