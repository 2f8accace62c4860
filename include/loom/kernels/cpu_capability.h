// What the host CPU can run, as named features and as an ordered capability
// tier. Kernel variants state the features they need; the tier orders them so
// selection can prefer the most specialised variant the CPU supports, the way
// Transformers' kernels pick a CUDA variant by a compute-capability range:
//
//   baseline < avx2 (avx2+fma) < avx512 (+f, bw, vl, dq) < avx512_bf16 (+avx512_bf16)
//
// kernels/ may not use runtime/, so the detection here is its own
// (__builtin_cpu_supports), not the runtime's dispatcher.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"

namespace loom::kernels {

enum class CpuLevel : int { kBaseline = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Bf16 = 3 };

const char* cpu_level_name(CpuLevel level);
// "baseline", "avx2", "avx512", "avx512_bf16".
Result<CpuLevel> parse_cpu_level(std::string_view name);

// Feature names loom knows: sse4_2 avx avx2 fma f16c avx512f avx512bw avx512vl
// avx512dq avx512cd avx512_vnni avx512_bf16 avx512_fp16.
bool is_known_cpu_feature(std::string_view name);
const std::vector<std::string>& known_cpu_features();
// The tier a feature implies (avx2 → avx2, avx512bw → avx512, avx512_bf16 →
// avx512_bf16, sse4_2 → baseline). Unknown names give kBaseline.
CpuLevel level_of_feature(std::string_view name);

class CpuFeatures {
 public:
  // The machine we run on, detected once.
  static const CpuFeatures& host();
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
  CpuLevel level_ = CpuLevel::kBaseline;
};

}  // namespace loom::kernels
