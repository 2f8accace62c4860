// What the CPU (and the OS, for register state) can run, and the one tier table
// that every ISA choice in loom reads: the hand-written SIMD kernels (runtime/cpu),
// the Highway-built ones (runtime/cpu and core's quantizers) and the selection of
// kernels/ variants (KernelSpec cpu_features, `loom kernels`).
//
// The tier in use is chosen once per process, at first use: LOOM_FORCE_ISA if set,
// else best_isa(). Values (case-insensitive):
//   scalar       portable C++ only (Highway: EMU128/SCALAR)
//   avx2         AVX2 + FMA + F16C            (Highway: AVX2 and below)
//   avx512       + AVX-512 F/BW/DQ/VL         (Highway: AVX3_DL, AVX3 and below)
//   avx512_bf16  + AVX512_BF16 (vdpbf16ps)    (Highway: as avx512)
// A value the CPU cannot run, or an unknown one, is a warning and the automatic
// choice is used. The forced tier reaches Highway through hwy::DisableTargets (its
// public switch for unwanted targets), never through its test hooks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/status.h"

namespace loom::cpu {

// Compiled code paths ("tiers"), each a superset of the previous one's requirements.
enum class Isa : uint8_t { kScalar = 0, kAvx2, kAvx512, kAvx512Bf16 };

struct CpuFeatures {
  bool sse4_2 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
  bool avx512cd = false;
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool avx512_fp16 = false;
  bool avx_vnni = false;
  bool amx_tile = false;  // hardware bits and XCR0 tile state; Linux still needs arch_prctl to use it
  bool amx_bf16 = false;
  bool amx_int8 = false;
  // vdpbf16ps retires at vfmadd's rate (two bf16 products per lane against one f32):
  // AMD Zen 4 and later with AVX512_BF16. Intel cores with AVX512_BF16 run it at a
  // quarter of that rate (measured on a Sapphire Rapids class Xeon). Matmul precision
  // "medium" uses bf16 dot products only where this holds.
  bool fast_bf16_dot = false;
  // Per-core L2 size in bytes (0 if unknown): sizes the blocks kernels keep there.
  int64_t l2_cache_bytes = 0;
};

// One row of the tier table: a feature by its loom name, the tier it belongs to,
// and whether the tier requires it (avx512cd belongs to avx512 but no path needs it).
struct CpuFeatureInfo {
  const char* name;  // "avx2", "avx512bw", "avx512_bf16", …
  Isa tier;
  bool defines_tier;
  bool CpuFeatures::*present;
};
// Every feature loom knows, in tier order.
const std::vector<CpuFeatureInfo>& cpu_feature_table();
// The entry for `name`, or nullptr.
const CpuFeatureInfo* find_cpu_feature(std::string_view name);

// Detected once on first call (cpuid + xgetbv).
const CpuFeatures& cpu_features();
// "avx2 fma f16c avx512f …" — for logs and `loom version`.
std::string cpu_features_string();

std::string_view isa_name(Isa isa);  // "SCALAR", "AVX2", "AVX512", "AVX512_BF16"
// Case-insensitive "scalar|avx2|avx512|avx512_bf16"; an unknown name is an
// InvalidArgument error that lists the valid ones.
Result<Isa> parse_isa(std::string_view name);
// The highest tier whose defining features `has` reports, each tier needing those
// of the tiers below it too.
template <typename Has>
Isa highest_isa(Has has) {
  Isa best = Isa::kScalar;
  for (Isa isa : {Isa::kAvx2, Isa::kAvx512, Isa::kAvx512Bf16}) {
    for (const CpuFeatureInfo& f : cpu_feature_table())
      if (f.defines_tier && f.tier <= isa && !has(f)) return best;
    best = isa;
  }
  return best;
}
// Whether this CPU/OS can execute the path.
bool isa_supported(Isa isa);
// The path chosen when nothing is forced: the fastest one measured for this CPU
// (see the comment in cpu_features.cc for why AVX512_BF16 is not always it).
Isa best_isa();

// The path in use, chosen once per process (see the top of this file). Cheap: a
// relaxed load, so kernels may read it where they pick their table.
Isa active_isa();
// Name of active_isa(), e.g. "AVX512".
std::string isa_name();
// Whether the active path admits `feature` (a CPU with it, at a tier not above the
// active one): what kernels/ variant selection sees as the host's features.
bool feature_active(const CpuFeatureInfo& feature);

// Tests and benchmarks run every path on one machine with these; a program sets
// its path with LOOM_FORCE_ISA. Not meant to be flipped while other threads run
// kernels (the Highway target changes with it).
//
// Forces a path for the whole process ("" returns to best_isa()). Fails (and
// changes nothing) for an unknown name or a path this CPU cannot run.
Status set_forced_isa(std::string_view name);
// Re-reads LOOM_FORCE_ISA. A bad value is returned as an error, logged as a
// warning, and ignored (best_isa() is used).
Status reload_forced_isa_from_env();

// RAII override for tests: forces `isa` for the scope, restores the previous one.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

}  // namespace loom::cpu
