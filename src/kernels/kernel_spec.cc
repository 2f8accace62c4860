#include "loom/kernels/kernel_spec.h"

#include <algorithm>
#include <charconv>

#include "loom/kernels/kernel_config.h"
#include "loom/kernels/kernel_ref.h"
#include "loom/kernels/layer_names.h"

namespace loom::kernels {

Result<KernelVersion> KernelVersion::parse(std::string_view text) {
  KernelVersion v{0, 0, 0};
  int* parts[3] = {&v.major, &v.minor, &v.patch};
  size_t start = 0;
  for (int i = 0; i < 3; ++i) {
    const auto dot = text.find('.', start);
    const std::string_view p = text.substr(start, dot == std::string_view::npos ? text.npos : dot - start);
    int value = 0;
    auto [ptr, ec] = std::from_chars(p.data(), p.data() + p.size(), value);
    if (p.empty() || ec != std::errc() || ptr != p.data() + p.size() || value < 0)
      return invalid_argument("bad kernel version '" + std::string(text) + "' (expected major.minor.patch)");
    *parts[i] = value;
    if (dot == std::string_view::npos) break;
    if (i == 2) return invalid_argument("bad kernel version '" + std::string(text) + "' (more than three parts)");
    start = dot + 1;
  }
  if (v.major < 1) return invalid_argument("bad kernel version '" + std::string(text) + "' (major must be ≥ 1)");
  return v;
}

std::string KernelVersion::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

CpuLevel KernelSpec::min_cpu_level() const {
  CpuLevel l = CpuLevel::kScalar;
  for (const auto& f : cpu_features) l = std::max(l, level_of_feature(f));
  return l;
}

bool KernelSpec::provides(const std::string& layer_key) const {
  return std::find(layers.begin(), layers.end(), layer_key) != layers.end();
}

bool KernelSpec::runs_on(const std::string& device, const CpuFeatures& cpu, std::string* why) const {
  if (std::find(devices.begin(), devices.end(), device) == devices.end()) {
    std::string d;
    for (const auto& x : devices) d += (d.empty() ? "" : ", ") + x;
    if (why) *why = id() + " runs on [" + d + "], not " + device;
    return false;
  }
  if (device != "cpu") return true;
  for (const auto& f : cpu_features) {
    if (!cpu.has(f)) {
      if (why) *why = id() + " needs CPU feature " + f;
      return false;
    }
  }
  if (max_cpu_level && cpu.level() > *max_cpu_level) {
    if (why)
      *why = id() + " is meant for CPUs up to " + cpu_level_name(*max_cpu_level) + ", this one is " +
             cpu_level_name(cpu.level());
    return false;
  }
  return true;
}

std::string KernelSpec::id() const { return repo + ":" + name + " " + version.to_string(); }

std::string KernelSpec::describe() const {
  std::string d;
  for (const auto& x : devices) d += (d.empty() ? "" : ", ") + x;
  std::string range = cpu_level_name(min_cpu_level());
  range += "..";
  range += max_cpu_level ? cpu_level_name(*max_cpu_level) : "";
  return id() + " [" + d + "; cpu " + range + "]";
}

Status KernelSpec::validate() const {
  const std::string who = "kernel " + repo + ":" + name + " (" + source + ")";
  LOOM_ASSIGN_OR_RETURN(KernelRef ref, KernelRef::parse(repo + ":" + name));
  (void)ref;
  if (layers.empty()) return invalid_argument(who + ": provides no layers");
  for (const auto& key : layers) {
    size_t start = 0;
    while (true) {
      const auto plus = key.find('+', start);
      const std::string part = key.substr(start, plus == std::string::npos ? std::string::npos : plus - start);
      if (!is_kernel_layer_name(part))
        return invalid_argument(who + ": unknown layer name '" + part + "' in '" + key + "' (known: " +
                                kernel_layer_names_list() + ")");
      if (plus == std::string::npos) break;
      start = plus + 1;
    }
  }
  if (devices.empty()) return invalid_argument(who + ": lists no devices");
  for (const auto& d : devices)
    if (!is_known_device(d)) return invalid_argument(who + ": unknown device '" + d + "'");
  for (const auto& f : cpu_features)
    if (!is_known_cpu_feature(f)) return invalid_argument(who + ": unknown CPU feature '" + f + "'");
  if (max_cpu_level && *max_cpu_level < min_cpu_level())
    return invalid_argument(who + ": max_cpu_level " + cpu_level_name(*max_cpu_level) + " is below what its features need (" +
                            cpu_level_name(min_cpu_level()) + ")");
  return Status::Ok();
}

std::string LayoutInstance::describe() const {
  std::string s = "layout at " + slot + ": ";
  for (size_t i = 0; i < parameters.size(); ++i) s += (i ? ", " : "") + parameters[i].name;
  s += " (" + std::to_string(rules.size()) + " rule" + (rules.size() == 1 ? "" : "s") + ")";
  return s;
}

}  // namespace loom::kernels
