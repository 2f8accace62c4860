#include "loom/kernels/cpu_capability.h"

namespace loom::kernels {

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::kScalar: return "baseline";
    case CpuLevel::kAvx2: return "avx2";
    case CpuLevel::kAvx512: return "avx512";
    case CpuLevel::kAvx512Bf16: return "avx512_bf16";
  }
  return "?";
}

Result<CpuLevel> parse_cpu_level(std::string_view name) {
  if (name == "scalar") return CpuLevel::kScalar;
  for (CpuLevel l : {CpuLevel::kScalar, CpuLevel::kAvx2, CpuLevel::kAvx512, CpuLevel::kAvx512Bf16})
    if (name == cpu_level_name(l)) return l;
  return invalid_argument("unknown CPU capability level '" + std::string(name) +
                          "' (known: baseline, avx2, avx512, avx512_bf16)");
}

bool is_known_cpu_feature(std::string_view name) { return cpu::find_cpu_feature(name) != nullptr; }

const std::vector<std::string>& known_cpu_features() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const cpu::CpuFeatureInfo& f : cpu::cpu_feature_table()) v.push_back(f.name);
    return v;
  }();
  return names;
}

CpuLevel level_of_feature(std::string_view name) {
  const cpu::CpuFeatureInfo* f = cpu::find_cpu_feature(name);
  return f ? f->tier : CpuLevel::kScalar;
}

CpuFeatures CpuFeatures::host() {
  CpuFeatures c;
  for (const cpu::CpuFeatureInfo& f : cpu::cpu_feature_table())
    if (cpu::feature_active(f)) c.names_.insert(f.name);
  c.level_ = cpu::active_isa();
  return c;
}

Result<CpuFeatures> CpuFeatures::from_names(const std::vector<std::string>& names) {
  CpuFeatures c;
  for (const auto& n : names) {
    if (!is_known_cpu_feature(n)) return invalid_argument("unknown CPU feature '" + n + "'");
    c.names_.insert(n);
  }
  c.level_ = cpu::highest_isa([&](const cpu::CpuFeatureInfo& f) { return c.names_.count(f.name) != 0; });
  return c;
}

std::string CpuFeatures::describe() const {
  std::string s = cpu_level_name(level_);
  s += " (";
  bool first = true;
  for (const auto& n : names_) {
    if (!first) s += ' ';
    s += n;
    first = false;
  }
  return s + ")";
}

}  // namespace loom::kernels
