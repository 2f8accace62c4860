// The kernels a model load may choose from: loom's built-ins (repo "loom") and
// plugins found in plugin directories. One registry per load (or shared by a
// front end); it holds no model state, only which libraries it has loaded.
//
//   KernelRegistry reg;                                   // built-ins
//   reg.add_plugin_directory("/usr/lib/loom/kernels", /*trusted=*/true);
//   reg.add_plugin_directory(home + "/.loom/kernels", /*trusted=*/false);
//
// A plugin repo "owner/name" is the first directory <dir>/owner/name that
// exists, in the order directories were added. Loading it from an untrusted
// directory needs trust_remote_code on the ref; the check comes before dlopen.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/kernels/kernel_ref.h"
#include "loom/kernels/kernel_spec.h"

namespace loom::kernels {

struct PluginDirectory {
  std::string path;
  bool trusted = false;
};

class KernelRegistry {
 public:
  KernelRegistry();  // with builtin_kernels()

  void add_plugin_directory(std::string path, bool trusted);
  // Another kernel under repo "loom" (or any repo: it shadows plugin lookup for
  // that repo). kInvalidArgument when the spec does not validate.
  Status add_builtin(KernelSpec spec);

  // Every variant of ref.repo:ref.name (all versions and tiers). Errors:
  // kNotFound (repo in no directory, no such kernel in it), kFailedPrecondition
  // (untrusted directory without trust_remote_code), plugin load errors.
  Result<std::vector<std::shared_ptr<const KernelSpec>>> find(const KernelRef& ref);

  const std::vector<PluginDirectory>& plugin_directories() const { return dirs_; }
  // Paths of the plugin libraries loaded so far.
  std::vector<std::string> loaded_libraries() const;

 private:
  Result<const std::vector<std::shared_ptr<const KernelSpec>>*> repo_kernels(const KernelRef& ref);

  std::vector<PluginDirectory> dirs_;
  std::map<std::string, std::vector<std::shared_ptr<const KernelSpec>>> repos_;  // repo → variants
  std::vector<std::string> loaded_;
};

// The kernels loom ships: FusedRMSNorm (RMSNorm), SiLUAndMul (SiLUAndMul),
// FusedQKV (Attention; layout qkv_proj), RMSNormMLP (RMSNorm+MLP; layout
// gate_up_proj + down_proj at the norm's slot). All "loom", version 1.0.0, cpu.
std::vector<KernelSpec> builtin_kernels();

}  // namespace loom::kernels
