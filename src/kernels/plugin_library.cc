#include "loom/kernels/plugin_library.h"

#include <dlfcn.h>

#include <memory>

#include "loom/kernels/plugin_abi.h"

namespace loom::kernels {

namespace {

std::vector<std::string> string_list(const char* const* list) {
  std::vector<std::string> out;
  if (!list) return out;
  for (; *list; ++list) out.emplace_back(*list);
  return out;
}

}  // namespace

Result<std::vector<KernelSpec>> load_plugin_library(const std::string& path, const std::string& expected_repo) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return io_error("kernel plugin " + path + ": cannot load: " + (err ? err : "unknown error"));
  }
  std::shared_ptr<void> library(handle, [](void* h) { dlclose(h); });
  dlerror();
  void* sym = dlsym(handle, LOOM_KERNEL_MANIFEST_SYMBOL);
  if (!sym) return not_found("kernel plugin " + path + ": no symbol " + LOOM_KERNEL_MANIFEST_SYMBOL);
  auto fn = reinterpret_cast<LoomKernelManifestFn>(sym);
  const LoomKernelManifest* m = fn();
  if (!m) return invalid_argument("kernel plugin " + path + ": " + LOOM_KERNEL_MANIFEST_SYMBOL + " returned NULL");
  if (m->abi_version != LOOM_KERNEL_ABI_VERSION)
    return unsupported("kernel plugin " + path + ": ABI version " + std::to_string(m->abi_version) +
                       ", loom speaks " + std::to_string(LOOM_KERNEL_ABI_VERSION));
  const std::string repo = m->repo ? m->repo : "";
  if (repo != expected_repo)
    return invalid_argument("kernel plugin " + path + ": manifest names repo '" + repo + "' but was found as '" +
                            expected_repo + "'");
  if (m->num_kernels > 0 && !m->kernels) return invalid_argument("kernel plugin " + path + ": kernels is NULL");
  std::vector<KernelSpec> specs;
  for (uint32_t i = 0; i < m->num_kernels; ++i) {
    const LoomKernelEntry& e = m->kernels[i];
    const std::string where = "kernel plugin " + path + ": kernel #" + std::to_string(i);
    if (!e.name || !e.version) return invalid_argument(where + ": name and version are required");
    KernelSpec s;
    s.repo = repo;
    s.name = e.name;
    auto v = KernelVersion::parse(e.version);
    if (!v.ok()) return v.status().with_context(where + " (" + s.name + ")");
    s.version = *v;
    s.revision = e.revision ? e.revision : "";
    s.devices = string_list(e.devices);
    s.cpu_features = string_list(e.cpu_features);
    if (e.max_cpu_level) {
      auto l = parse_cpu_level(e.max_cpu_level);
      if (!l.ok()) return l.status().with_context(where + " (" + s.name + ")");
      s.max_cpu_level = *l;
    }
    s.layers = string_list(e.layers);
    s.entry_signature = e.entry_signature ? e.entry_signature : "";
    s.entry = e.entry;
    s.source = path;
    s.keep_alive = library;
    LOOM_RETURN_IF_ERROR(s.validate());
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace loom::kernels
