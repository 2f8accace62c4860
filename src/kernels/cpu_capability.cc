#include "loom/kernels/cpu_capability.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>

namespace loom::kernels {

namespace {

struct FeatureInfo {
  const char* name;
  CpuLevel level;
};

constexpr FeatureInfo kFeatures[] = {
    {"sse4_2", CpuLevel::kBaseline},     {"avx", CpuLevel::kBaseline},        {"avx2", CpuLevel::kAvx2},
    {"fma", CpuLevel::kAvx2},            {"f16c", CpuLevel::kAvx2},           {"avx512f", CpuLevel::kAvx512},
    {"avx512bw", CpuLevel::kAvx512},     {"avx512vl", CpuLevel::kAvx512},     {"avx512dq", CpuLevel::kAvx512},
    {"avx512cd", CpuLevel::kAvx512},     {"avx512_vnni", CpuLevel::kAvx512},  {"avx512_bf16", CpuLevel::kAvx512Bf16},
    {"avx512_fp16", CpuLevel::kAvx512Bf16},
};

// The features that define each tier (each tier includes the ones below it).
const std::vector<std::vector<std::string>>& tier_requirements() {
  static const std::vector<std::vector<std::string>> tiers = {
      {},
      {"avx2", "fma"},
      {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"},
      {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"},
  };
  return tiers;
}

CpuLevel level_from(const std::set<std::string>& names) {
  CpuLevel level = CpuLevel::kBaseline;
  const auto& tiers = tier_requirements();
  for (size_t t = 1; t < tiers.size(); ++t) {
    const bool all = std::all_of(tiers[t].begin(), tiers[t].end(), [&](const std::string& f) { return names.count(f); });
    if (!all) break;
    level = static_cast<CpuLevel>(t);
  }
  return level;
}

std::set<std::string> detect() {
  std::set<std::string> s;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  auto add = [&](bool present, const char* name) {
    if (present) s.insert(name);
  };
  add(__builtin_cpu_supports("sse4.2"), "sse4_2");
  add(__builtin_cpu_supports("avx"), "avx");
  add(__builtin_cpu_supports("avx2"), "avx2");
  add(__builtin_cpu_supports("fma"), "fma");
  // clang before 15 knows neither "f16c" nor "avx512fp16" as __builtin_cpu_supports
  // names: CPUID bits, with the register state the OS enables (AVX, AVX-512).
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  const bool avx512fp16 = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d & (1u << 23));
  add(f16c && __builtin_cpu_supports("avx"), "f16c");
  add(__builtin_cpu_supports("avx512f"), "avx512f");
  add(__builtin_cpu_supports("avx512bw"), "avx512bw");
  add(__builtin_cpu_supports("avx512vl"), "avx512vl");
  add(__builtin_cpu_supports("avx512dq"), "avx512dq");
  add(__builtin_cpu_supports("avx512cd"), "avx512cd");
  add(__builtin_cpu_supports("avx512vnni"), "avx512_vnni");
  add(__builtin_cpu_supports("avx512bf16"), "avx512_bf16");
  add(avx512fp16 && __builtin_cpu_supports("avx512f"), "avx512_fp16");
#endif
  return s;
}

}  // namespace

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::kBaseline: return "baseline";
    case CpuLevel::kAvx2: return "avx2";
    case CpuLevel::kAvx512: return "avx512";
    case CpuLevel::kAvx512Bf16: return "avx512_bf16";
  }
  return "?";
}

Result<CpuLevel> parse_cpu_level(std::string_view name) {
  for (int l = 0; l <= static_cast<int>(CpuLevel::kAvx512Bf16); ++l)
    if (name == cpu_level_name(static_cast<CpuLevel>(l))) return static_cast<CpuLevel>(l);
  return invalid_argument("unknown CPU capability level '" + std::string(name) +
                          "' (known: baseline, avx2, avx512, avx512_bf16)");
}

bool is_known_cpu_feature(std::string_view name) {
  return std::any_of(std::begin(kFeatures), std::end(kFeatures), [&](const FeatureInfo& f) { return name == f.name; });
}

const std::vector<std::string>& known_cpu_features() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& f : kFeatures) v.push_back(f.name);
    return v;
  }();
  return names;
}

CpuLevel level_of_feature(std::string_view name) {
  for (const auto& f : kFeatures)
    if (name == f.name) return f.level;
  return CpuLevel::kBaseline;
}

const CpuFeatures& CpuFeatures::host() {
  static const CpuFeatures host = [] {
    CpuFeatures c;
    c.names_ = detect();
    c.level_ = level_from(c.names_);
    return c;
  }();
  return host;
}

Result<CpuFeatures> CpuFeatures::from_names(const std::vector<std::string>& names) {
  CpuFeatures c;
  for (const auto& n : names) {
    if (!is_known_cpu_feature(n)) return invalid_argument("unknown CPU feature '" + n + "'");
    c.names_.insert(n);
  }
  c.level_ = level_from(c.names_);
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
