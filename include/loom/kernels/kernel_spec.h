// One kernel variant the registry knows: a built-in or one entry of a plugin's
// manifest. Several variants may share repo and name (versions; CPU tiers).
#pragma once

#include <compare>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"
#include "loom/kernels/cpu_capability.h"
#include "loom/kernels/kernel_layout.h"

namespace loom::kernels {

struct KernelVersion {
  int major = 1;
  int minor = 0;
  int patch = 0;

  // "2", "2.1" or "2.1.0".
  static Result<KernelVersion> parse(std::string_view text);
  std::string to_string() const;
  auto operator<=>(const KernelVersion&) const = default;
};

struct KernelSpec {
  std::string repo;
  std::string name;
  KernelVersion version;
  std::string revision;                    // "" when the kernel has none
  std::vector<std::string> devices;        // {"cpu"}
  std::vector<std::string> cpu_features;   // every one must be present
  std::optional<CpuLevel> max_cpu_level;   // the top of its capability range
  std::vector<std::string> layers;         // {"RMSNorm"} or {"RMSNorm+MLP"}
  // A fused kernel that replaces only what follows the first child of its chain:
  // the residual add joining the children and the last child (a fused add +
  // RMSNorm). The first child keeps its own forward, or the kernel its layer entry
  // gives it (FusedQKV on the Attention before the add). Plugins get this from
  // their calling convention (LOOM_CALL_ADD_RMS_NORM_F32_V1).
  bool residual_tail = false;
  KernelLayout layout;                     // empty: the module's parameters are used as they are
  std::string entry_signature;             // plugins: calling convention of `entry`
  void (*entry)(void) = nullptr;
  std::string source = "built-in";         // or the plugin library's path
  std::shared_ptr<void> keep_alive;        // holds a plugin library open

  // The bottom of its capability range: the highest tier its features imply.
  CpuLevel min_cpu_level() const;
  bool provides(const std::string& layer_key) const;
  // Whether it can run on `device` with `cpu`; when not, *why says so.
  bool runs_on(const std::string& device, const CpuFeatures& cpu, std::string* why) const;
  // "acme/norms:CustomRMSNorm 2.1.0".
  std::string id() const;
  // id() plus range: "acme/norms:CustomRMSNorm 2.1.0 [cpu, avx2..avx512]".
  std::string describe() const;
  // Names, layers, devices and features are known; kInvalidArgument naming the kernel otherwise.
  Status validate() const;
};

}  // namespace loom::kernels
