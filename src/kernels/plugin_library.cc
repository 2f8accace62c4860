#include "loom/kernels/plugin_library.h"

#include <dlfcn.h>

#include <memory>

#include "loom/kernels/plugin_abi.h"
#include "loom/weights/conversion_ops.h"

namespace loom::kernels {

namespace {

std::vector<std::string> string_list(const char* const* list) {
  std::vector<std::string> out;
  if (!list) return out;
  for (; *list; ++list) out.emplace_back(*list);
  return out;
}

// One declared parameter, copied out of the manifest.
struct ParamDecl {
  std::string name;
  std::vector<std::pair<size_t, std::string>> sources;  // (module index, name under it)
  int concat_dim = 0;
  bool transpose = false;
};

Result<ParamDecl> copy_param(const LoomKernelParam& p, const std::string& where) {
  ParamDecl d;
  if (!p.name || !*p.name) return invalid_argument(where + ": a parameter without a name");
  d.name = p.name;
  const std::string who = where + ": parameter '" + d.name + "'";
  for (const std::string& src : string_list(p.sources)) {
    const size_t colon = src.find(':');
    size_t index = 0;
    bool digits = colon != std::string::npos && colon > 0;
    for (size_t i = 0; digits && i < colon; ++i) digits = src[i] >= '0' && src[i] <= '9';
    if (!digits || colon + 1 >= src.size())
      return invalid_argument(who + ": source '" + src + "' is not \"<module index>:<parameter name>\"");
    index = std::stoul(src.substr(0, colon));
    d.sources.emplace_back(index, src.substr(colon + 1));
  }
  if (d.sources.empty()) return invalid_argument(who + ": no sources");
  if (p.concat_dim < 0) return invalid_argument(who + ": concat_dim must be ≥ 0");
  d.concat_dim = p.concat_dim;
  d.transpose = p.transpose != 0;
  return d;
}

// The `<Name>Layout` of a plugin kernel: its declared parameters resolved
// against the modules it replaces, as weight rules the model's load applies.
KernelLayout declared_layout(std::vector<ParamDecl> decls, std::string kernel) {
  return [decls = std::move(decls), kernel = std::move(kernel)](const LayoutRequest& r) -> Result<LayoutInstance> {
    if (r.slot >= r.modules.size()) return internal_error(kernel + " layout: no module holds the parameters");
    const std::string slot = r.modules[r.slot]->path;
    LayoutInstance li;
    li.slot = slot;
    for (const ParamDecl& d : decls) {
      const std::string who = kernel + " layout: parameter '" + d.name + "' at " + slot;
      std::vector<const ParamInfo*> src;
      for (const auto& [index, leaf] : d.sources) {
        if (index >= r.modules.size())
          return invalid_argument(who + ": source module " + std::to_string(index) + " does not exist (the kernel replaces " +
                                  std::to_string(r.modules.size()) + " module(s))");
        const ModuleInfo& m = *r.modules[index];
        const std::string full = m.path + "." + leaf;
        const ParamInfo* p = m.find_parameter(full);
        if (!p) return not_found(who + ": module " + m.path + " (" + m.class_name + ") has no parameter " + full);
        src.push_back(p);
      }
      Shape shape = src[0]->shape;
      const int64_t rank = static_cast<int64_t>(shape.size());
      if (src.size() > 1) {
        if (d.concat_dim >= rank)
          return invalid_argument(who + ": concat_dim " + std::to_string(d.concat_dim) + " but " + src[0]->name +
                                  " has rank " + std::to_string(rank));
        for (size_t i = 1; i < src.size(); ++i) {
          const Shape& s = src[i]->shape;
          bool fits = static_cast<int64_t>(s.size()) == rank;
          for (int64_t k = 0; fits && k < rank; ++k) fits = k == d.concat_dim || s[k] == shape[k];
          if (!fits)
            return invalid_argument(who + ": cannot concatenate " + src[0]->name + " " + shape_to_string(src[0]->shape) +
                                    " and " + src[i]->name + " " + shape_to_string(s) + " along dimension " +
                                    std::to_string(d.concat_dim));
          shape[d.concat_dim] += s[d.concat_dim];
        }
      }
      if (d.transpose) {
        if (rank != 2) return invalid_argument(who + ": transpose needs a 2-D result, not " + shape_to_string(shape));
        std::swap(shape[0], shape[1]);
      }
      const std::string target = slot + "." + d.name;
      li.parameters.push_back({target, shape, src[0]->name});
      const bool kept = src.size() == 1 && !d.transpose && src[0]->name == target;
      if (kept) continue;
      for (const ParamInfo* p : src) li.replaced.push_back(p->name);
      const std::string why = kernel + " at " + slot;
      if (src.size() == 1 && !d.transpose) {
        li.rules.push_back(WeightRenaming{"^" + src[0]->name + "$", target, false, why});
        continue;
      }
      WeightConverter c;
      for (const ParamInfo* p : src) c.sources.push_back("^" + p->name + "$");
      c.targets = {"^" + target + "$"};
      if (src.size() > 1) c.operations.push_back(Concatenate(d.concat_dim));
      if (d.transpose) c.operations.push_back(Transpose(0, 1));
      c.name = why;
      li.rules.push_back(std::move(c));
    }
    return li;
  };
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
  if (m->abi_version < LOOM_KERNEL_ABI_MIN_VERSION || m->abi_version > LOOM_KERNEL_ABI_VERSION)
    return unsupported("kernel plugin " + path + ": ABI version " + std::to_string(m->abi_version) + ", loom speaks " +
                       std::to_string(LOOM_KERNEL_ABI_MIN_VERSION) + " to " + std::to_string(LOOM_KERNEL_ABI_VERSION));
  const std::string repo = m->repo ? m->repo : "";
  if (repo != expected_repo)
    return invalid_argument("kernel plugin " + path + ": manifest names repo '" + repo + "' but was found as '" +
                            expected_repo + "'");
  if (m->num_kernels > 0 && !m->kernels) return invalid_argument("kernel plugin " + path + ": kernels is NULL");
  std::vector<KernelSpec> specs;
  for (uint32_t i = 0; i < m->num_kernels; ++i) {
    // A version 1 manifest's entries are the shorter LoomKernelEntryV1: copied
    // into a LoomKernelEntry with no parameters of its own.
    LoomKernelEntry e{};
    if (m->abi_version == 1) {
      const LoomKernelEntryV1& v1 = static_cast<const LoomKernelEntryV1*>(m->kernels)[i];
      e = {v1.name, v1.version, v1.revision, v1.devices, v1.cpu_features, v1.max_cpu_level, v1.layers,
           v1.entry_signature, v1.entry, nullptr, 0};
    } else {
      e = static_cast<const LoomKernelEntry*>(m->kernels)[i];
    }
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
    // The convention says what the entry computes: an add + RMSNorm replaces the
    // residual add and the norm, not the module whose output it adds.
    s.residual_tail = s.entry_signature == LOOM_CALL_ADD_RMS_NORM_F32_V1;
    s.entry = e.entry;
    s.source = path;
    s.keep_alive = library;
    if (e.num_params > 0 && !e.params) return invalid_argument(where + " (" + s.name + "): params is NULL");
    if (e.num_params > 0) {
      std::vector<ParamDecl> decls;
      for (uint32_t k = 0; k < e.num_params; ++k) {
        LOOM_ASSIGN_OR_RETURN(ParamDecl d, copy_param(e.params[k], where + " (" + s.name + ")"));
        for (const ParamDecl& other : decls)
          if (other.name == d.name) return invalid_argument(where + " (" + s.name + "): parameter '" + d.name + "' twice");
        decls.push_back(std::move(d));
      }
      s.layout = declared_layout(std::move(decls), repo + ":" + s.name);
    }
    LOOM_RETURN_IF_ERROR(s.validate());
    specs.push_back(std::move(s));
  }
  return specs;
}

}  // namespace loom::kernels
