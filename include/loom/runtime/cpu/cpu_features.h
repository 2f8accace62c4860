// What the CPU (and the OS, for register state) can run, and which compiled code
// path the CPU kernels use. Detection happens once; the path can be forced with
// LOOM_FORCE_ISA=scalar|avx2|avx512|avx512_bf16 (read when the process starts) or
// set_forced_isa() so tests run every path on one machine. Forcing reaches every
// kernel: the hand-written ones read active_isa(), the Highway-built ones (core's
// quantizers too) are limited to the matching targets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "loom/core/status.h"

namespace loom::cpu {

struct CpuFeatures {
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512dq = false;
  bool avx512vl = false;
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

// Detected once on first call (cpuid + xgetbv).
const CpuFeatures& cpu_features();
// "avx2 fma f16c avx512f …" — for logs and `loom version`.
std::string cpu_features_string();

// Compiled code paths, each a superset of the previous one's requirements.
//   kScalar     portable C++
//   kAvx2       AVX2 + FMA + F16C
//   kAvx512     AVX-512 F/BW/DQ/VL (+ FMA, F16C)
//   kAvx512Bf16 kAvx512 + AVX512_BF16 (vdpbf16ps for bf16 weights)
enum class Isa : uint8_t { kScalar = 0, kAvx2, kAvx512, kAvx512Bf16 };

std::string_view isa_name(Isa isa);  // "SCALAR", "AVX2", "AVX512", "AVX512_BF16"
// Case-insensitive "scalar|avx2|avx512|avx512_bf16"; an unknown name is an
// InvalidArgument error that lists the valid ones.
Result<Isa> parse_isa(std::string_view name);
// Whether this CPU/OS can execute the path.
bool isa_supported(Isa isa);
// The path chosen when nothing is forced: the fastest one measured for this CPU
// (see the comment in cpu_features.cc for why AVX512_BF16 is not always it).
Isa best_isa();

// The path in use: the forced one if any, else best_isa().
Isa active_isa();
// Name of active_isa(), e.g. "AVX512".
std::string isa_name();

// Forces a path for the whole process ("" clears it). Fails (and changes
// nothing) for an unknown name or a path this CPU cannot run. Not meant to be
// flipped while other threads run kernels.
Status set_forced_isa(std::string_view name);
// Re-reads LOOM_FORCE_ISA (done automatically on first use). A bad value is
// returned as an error, logged as a warning, and ignored (best_isa() is used).
Status reload_forced_isa_from_env();

// The Highway target the Highway-built kernels dispatch to now, e.g. "AVX3_DL";
// follows the forced path (a path below AVX2 gives Highway's static baseline).
std::string highway_target_name();
// Highway targets (HWY_* bits) a loom path admits.
int64_t highway_targets_for(Isa isa);

// RAII override for tests: forces `isa` for the scope, restores the previous one.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa);
  ~ScopedIsa();
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  int previous_;
};

}  // namespace loom::cpu
