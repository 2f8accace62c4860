#include "loom/kernels/kernel_registry.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "loom/kernels/plugin_library.h"

namespace loom::kernels {

namespace fs = std::filesystem;

KernelRegistry::KernelRegistry() {
  for (auto& spec : builtin_kernels()) throw_if_error(add_builtin(std::move(spec)));
}

void KernelRegistry::add_plugin_directory(std::string path, bool trusted) { dirs_.push_back({std::move(path), trusted}); }

Status KernelRegistry::add_builtin(KernelSpec spec) {
  LOOM_RETURN_IF_ERROR(spec.validate());
  repos_[spec.repo].push_back(std::make_shared<const KernelSpec>(std::move(spec)));
  return Status::Ok();
}

std::vector<std::string> KernelRegistry::loaded_libraries() const { return loaded_; }

Result<const std::vector<std::shared_ptr<const KernelSpec>>*> KernelRegistry::repo_kernels(const KernelRef& ref) {
  auto it = repos_.find(ref.repo);
  if (it != repos_.end()) return &it->second;
  if (ref.builtin()) return not_found("kernel repo '" + ref.repo + "' has no kernels");

  const PluginDirectory* found = nullptr;
  fs::path repo_dir;
  std::string searched;
  for (const auto& d : dirs_) {
    std::error_code ec;
    fs::path candidate = fs::path(d.path) / ref.repo;
    searched += (searched.empty() ? "" : ", ") + d.path;
    if (fs::is_directory(candidate, ec)) {
      found = &d;
      repo_dir = candidate;
      break;
    }
  }
  if (!found)
    return not_found("kernel repo '" + ref.repo + "' not found in plugin directories [" + searched + "]");
  if (!found->trusted && !ref.trust_remote_code)
    return failed_precondition("kernel repo '" + ref.repo + "' is in untrusted plugin directory " + found->path +
                               "; set trust_remote_code to load it");

  std::vector<std::string> libraries;
  std::error_code ec;
  for (fs::recursive_directory_iterator i(repo_dir, ec), end; !ec && i != end; i.increment(ec)) {
    if (i->is_regular_file() && i->path().extension() == ".so") libraries.push_back(i->path().string());
  }
  if (ec) return io_error("kernel repo '" + ref.repo + "': cannot list " + repo_dir.string() + ": " + ec.message());
  if (libraries.empty()) return not_found("kernel repo '" + ref.repo + "': no .so library under " + repo_dir.string());
  std::sort(libraries.begin(), libraries.end());

  std::vector<std::shared_ptr<const KernelSpec>> specs;
  for (const auto& lib : libraries) {
    LOOM_ASSIGN_OR_RETURN(std::vector<KernelSpec> loaded, load_plugin_library(lib, ref.repo));
    for (auto& s : loaded) specs.push_back(std::make_shared<const KernelSpec>(std::move(s)));
    loaded_.push_back(lib);
  }
  return &repos_.emplace(ref.repo, std::move(specs)).first->second;
}

Result<std::vector<std::shared_ptr<const KernelSpec>>> KernelRegistry::find(const KernelRef& ref) {
  LOOM_ASSIGN_OR_RETURN(const auto* all, repo_kernels(ref));
  std::vector<std::shared_ptr<const KernelSpec>> out;
  std::vector<std::string> names;
  for (const auto& s : *all) {
    if (s->name == ref.name) out.push_back(s);
    if (std::find(names.begin(), names.end(), s->name) == names.end()) names.push_back(s->name);
  }
  if (out.empty()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return not_found("kernel repo '" + ref.repo + "' has no kernel '" + ref.name + "' (it has: " + list + ")");
  }
  return out;
}

}  // namespace loom::kernels
