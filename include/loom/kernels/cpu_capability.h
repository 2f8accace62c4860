// What the host CPU can run, as named features and as an ordered capability
// tier, for choosing kernel variants: prefer the most specialised one the CPU
// supports, the way Transformers' kernels pick a CUDA variant by a
// compute-capability range. The names, the tiers and the host's detection are
// core's one table (loom/core/cpu_features.h); the tier names here are the ones
// kernel specs and `loom kernels` use:
//
//   baseline < avx2 (avx2 fma f16c) < avx512 (+ f bw dq vl) < avx512_bf16 (+ avx512_bf16)
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/cpu_features.h"
#include "loom/core/status.h"

namespace loom::kernels {

// core's tier (kScalar is spelled "baseline" here).
using CpuLevel = cpu::Isa;

const char* cpu_level_name(CpuLevel level);
// "baseline" (or "scalar"), "avx2", "avx512", "avx512_bf16".
Result<CpuLevel> parse_cpu_level(std::string_view name);

// Feature names loom knows (core's table): sse4_2 avx avx2 fma f16c avx_vnni avx512f
// avx512bw avx512dq avx512vl avx512cd avx512_vnni avx512_bf16 avx512_fp16 amx_*.
bool is_known_cpu_feature(std::string_view name);
const std::vector<std::string>& known_cpu_features();
// The tier a feature belongs to (avx2 → avx2, avx512bw → avx512, avx512_bf16 →
// avx512_bf16, sse4_2 → baseline). Unknown names give kScalar.
CpuLevel level_of_feature(std::string_view name);

class CpuFeatures {
 public:
  // The machine we run on as the process's tier admits it (LOOM_FORCE_ISA=avx2 on
  // an AVX-512 machine: the avx2 tier and no avx512 feature), so kernel variants
  // follow the same choice as the compute kernels.
  static CpuFeatures host();
  // A made-up CPU (tests, or a user override); the tier follows from the names.
  // kInvalidArgument naming the first unknown feature.
  static Result<CpuFeatures> from_names(const std::vector<std::string>& names);

  bool has(std::string_view feature) const { return names_.count(std::string(feature)) != 0; }
  // The highest tier whose defining features are all present.
  CpuLevel level() const { return level_; }
  const std::set<std::string>& names() const { return names_; }
  // "avx512_bf16 (avx avx2 avx512_bf16 …)".
  std::string describe() const;

 private:
  std::set<std::string> names_;
  CpuLevel level_ = CpuLevel::kScalar;
};

}  // namespace loom::kernels
