// Backend preparation for the portable exporter, registered per name like
// ExecuTorch's partitioners: each edits the lowered program for one runtime
// kernel set before memory planning.
#include <algorithm>
#include <mutex>

#include "loom/export/portable_program.h"

namespace loom::exporting {
namespace {

std::mutex& backends_mu() {
  static std::mutex m;
  return m;
}

std::map<std::string, PortablePrepareFn>& table() {
  static std::map<std::string, PortablePrepareFn> t = {{"reference", prepare_for_reference},
                                                       {"cpu_simd", prepare_for_cpu_simd}};
  return t;
}

}  // namespace

void register_portable_backend(const std::string& name, PortablePrepareFn prepare) {
  std::lock_guard<std::mutex> lock(backends_mu());
  table()[name] = std::move(prepare);
}

std::vector<std::string> portable_backends() {
  std::lock_guard<std::mutex> lock(backends_mu());
  std::vector<std::string> out;
  for (const auto& [name, fn] : table()) out.push_back(name);
  return out;
}

Status prepare_for_backend(const std::string& name, PortableProgram& program) {
  PortablePrepareFn fn;
  {
    std::lock_guard<std::mutex> lock(backends_mu());
    auto it = table().find(name);
    if (it != table().end()) fn = it->second;
  }
  if (!fn) {
    std::string known;
    for (const std::string& n : portable_backends()) known += (known.empty() ? "" : ", ") + n;
    return invalid_argument("portable export: no backend named '" + name + "' (registered: " + known + ")");
  }
  Status s = fn(program);
  if (!s.ok()) return Status(s.code(), "prepare_for_" + name + ": " + s.message());
  return Status::Ok();
}

// The scalar kernels need nothing but the name the runtime dispatches on.
Status prepare_for_reference(PortableProgram& p) {
  p.backend = "reference";
  return Status::Ok();
}

// The vectorized loops: same ops, the runtime's cpu_simd kernels; every arena
// tensor starts on a cache line so vector loads never split one.
Status prepare_for_cpu_simd(PortableProgram& p) {
  p.backend = "cpu_simd";
  p.arena_alignment = std::max<uint64_t>(p.arena_alignment, 64);
  return Status::Ok();
}

}  // namespace loom::exporting
