#include "loom/core/cpu_features.h"

#include <atomic>
#include <cctype>
#include <cstdlib>

#include "hwy/targets.h"
#include "loom/core/logging.h"

#if defined(__linux__)
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <cstring>
#define LOOM_X86 1
#endif

namespace loom::cpu {
namespace {

#if defined(LOOM_X86)
uint64_t read_xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__linux__) && defined(_SC_LEVEL2_CACHE_SIZE)
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  f.l2_cache_bytes = l2 > 0 ? l2 : 0;
#endif
#if defined(LOOM_X86)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse4_2 = (c >> 20) & 1;
  const bool osxsave = (c >> 27) & 1;
  if (!osxsave) return f;  // the OS saves no vector state: only scalar is safe
  const uint64_t xcr0 = read_xcr0();
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM + YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM_Hi256 + Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;    // XTILECFG + XTILEDATA
  f.avx = os_avx && ((c >> 28) & 1);
  f.fma = f.avx && ((c >> 12) & 1);
  f.f16c = f.avx && ((c >> 29) & 1);
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = f.avx && ((b >> 5) & 1);
  f.avx512f = os_avx512 && ((b >> 16) & 1);
  f.avx512dq = f.avx512f && ((b >> 17) & 1);
  f.avx512bw = f.avx512f && ((b >> 30) & 1);
  f.avx512vl = f.avx512f && ((b >> 31) & 1);
  f.avx512cd = f.avx512f && ((b >> 28) & 1);
  f.avx512_vnni = f.avx512f && ((c >> 11) & 1);
  f.avx512_fp16 = f.avx512f && ((d >> 23) & 1);
  f.amx_bf16 = os_amx && ((d >> 22) & 1);
  f.amx_tile = os_amx && ((d >> 24) & 1);
  f.amx_int8 = os_amx && ((d >> 25) & 1);
  unsigned sub_leaves = a;
  if (sub_leaves >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx_vnni = f.avx && ((a >> 4) & 1);
    f.avx512_bf16 = f.avx512f && ((a >> 5) & 1);
  }
  unsigned vendor[3] = {};
  __cpuid(0, a, vendor[0], vendor[2], vendor[1]);  // "AuthenticAMD" in ebx, edx, ecx
  const bool amd = std::memcmp(vendor, "AuthenticAMD", 12) == 0;
  __cpuid(1, a, b, c, d);
  const unsigned family = ((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? ((a >> 20) & 0xff) : 0);
  f.fast_bf16_dot = f.avx512_bf16 && amd && family >= 0x19;  // Zen 4 (0x19), Zen 5 (0x1a)
#endif
  return f;
}

// Highway targets (HWY_* bits) a loom path admits: those that need no more than
// it does. Highway picks the best of them it compiled, else its static baseline.
int64_t highway_targets_for(Isa isa) {
  constexpr int64_t kBelowAvx2 = HWY_SSE4 | HWY_SSSE3 | HWY_EMU128 | HWY_SCALAR;
  switch (isa) {
    case Isa::kScalar: return HWY_EMU128 | HWY_SCALAR;
    case Isa::kAvx2: return HWY_AVX2 | kBelowAvx2;
    case Isa::kAvx512:
    case Isa::kAvx512Bf16: return HWY_AVX3_DL | HWY_AVX3 | HWY_AVX2 | kBelowAvx2;
  }
  return HWY_EMU128 | HWY_SCALAR;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Parses and checks a forced-path name; "" means the automatic choice.
Result<Isa> resolve_forced(std::string_view name) {
  if (name.empty()) return best_isa();
  LOOM_ASSIGN_OR_RETURN(Isa isa, parse_isa(name));
  if (!isa_supported(isa)) {
    return unsupported("LOOM_FORCE_ISA=" + std::string(name) + ": this CPU cannot run the " +
                       std::string(isa_name(isa)) + " path (features: " + cpu_features_string() + ")");
  }
  return isa;
}

// Highway follows the tier through its public DisableTargets (its dispatch tables
// re-resolve on their next call); every change of the tier goes through here.
Isa apply(Isa isa) {
  hwy::DisableTargets(~highway_targets_for(isa));
  return isa;
}

Isa from_env() {
  const char* env = std::getenv("LOOM_FORCE_ISA");
  Result<Isa> isa = resolve_forced(env ? env : "");
  if (!isa.ok()) {
    log_warn(isa.status().message() + "; using " + std::string(isa_name(best_isa())));
    return best_isa();
  }
  return isa.value();
}

std::atomic<Isa>& active_slot() {
  static std::atomic<Isa> slot{apply(from_env())};
  return slot;
}

void store(Isa isa) { active_slot().store(apply(isa), std::memory_order_relaxed); }

}  // namespace

// Chosen when the process starts, not when a kernel first asks: Highway-dispatched
// code outside the runtime (core's quantizers, which loading a model runs before
// any kernel) must already see the tier's targets.
[[maybe_unused]] const bool g_isa_chosen_at_start = (active_isa(), true);

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

const std::vector<CpuFeatureInfo>& cpu_feature_table() {
  // The one tier table. A tier needs its defining features and those of every tier
  // below it; the other features belong to the tier that first has them.
  static const std::vector<CpuFeatureInfo> table = {
      {"sse4_2", Isa::kScalar, false, &CpuFeatures::sse4_2},
      {"avx", Isa::kScalar, false, &CpuFeatures::avx},
      {"avx2", Isa::kAvx2, true, &CpuFeatures::avx2},
      {"fma", Isa::kAvx2, true, &CpuFeatures::fma},
      {"f16c", Isa::kAvx2, true, &CpuFeatures::f16c},
      {"avx_vnni", Isa::kAvx2, false, &CpuFeatures::avx_vnni},
      {"avx512f", Isa::kAvx512, true, &CpuFeatures::avx512f},
      {"avx512bw", Isa::kAvx512, true, &CpuFeatures::avx512bw},
      {"avx512dq", Isa::kAvx512, true, &CpuFeatures::avx512dq},
      {"avx512vl", Isa::kAvx512, true, &CpuFeatures::avx512vl},
      {"avx512cd", Isa::kAvx512, false, &CpuFeatures::avx512cd},
      {"avx512_vnni", Isa::kAvx512, false, &CpuFeatures::avx512_vnni},
      {"avx512_bf16", Isa::kAvx512Bf16, true, &CpuFeatures::avx512_bf16},
      {"avx512_fp16", Isa::kAvx512Bf16, false, &CpuFeatures::avx512_fp16},
      {"amx_tile", Isa::kAvx512Bf16, false, &CpuFeatures::amx_tile},
      {"amx_bf16", Isa::kAvx512Bf16, false, &CpuFeatures::amx_bf16},
      {"amx_int8", Isa::kAvx512Bf16, false, &CpuFeatures::amx_int8},
  };
  return table;
}

const CpuFeatureInfo* find_cpu_feature(std::string_view name) {
  for (const CpuFeatureInfo& f : cpu_feature_table())
    if (name == f.name) return &f;
  return nullptr;
}

std::string cpu_features_string() {
  std::string s;
  for (const CpuFeatureInfo& f : cpu_feature_table()) {
    if (!(cpu_features().*f.present)) continue;
    if (!s.empty()) s += ' ';
    s += f.name;
  }
  return s.empty() ? "none" : s;
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "SCALAR";
    case Isa::kAvx2: return "AVX2";
    case Isa::kAvx512: return "AVX512";
    case Isa::kAvx512Bf16: return "AVX512_BF16";
  }
  return "?";
}

Result<Isa> parse_isa(std::string_view name) {
  const std::string n = lower(name);
  if (n == "scalar") return Isa::kScalar;
  if (n == "avx2") return Isa::kAvx2;
  if (n == "avx512") return Isa::kAvx512;
  if (n == "avx512_bf16") return Isa::kAvx512Bf16;
  return invalid_argument("LOOM_FORCE_ISA: unknown code path '" + std::string(name) +
                          "' (expected one of scalar, avx2, avx512, avx512_bf16)");
}

bool isa_supported(Isa isa) {
  static const Isa highest = highest_isa([](const CpuFeatureInfo& f) { return cpu_features().*f.present; });
  return isa <= highest;
}

// AVX512_BF16 is deliberately not the automatic choice even where the CPU has it.
// On the 2-core Xeon (Sapphire Rapids class) loom is tuned on, vdpbf16ps retires
// 1.3 G instr/s per core against 5.3 G for vfmadd (zmm): 84 vs 168 GFLOP/s. So
// for bf16 weights at M = 512 (bench/matmul_bench.cc, 2 threads) widening to f32
// and using FMA runs at 206-238 GFLOP/s, the vdpbf16ps kernel at 117-130 (oneDNN
// 2.6's, also vdpbf16ps: 129-132); decode is memory-bound and the two are within
// noise at DRAM-sized weights. Widening also keeps x in f32 (vdpbf16ps needs x
// rounded to bf16: NMSE ~3e-6 per layer) and makes every path bitwise identical.
// Where vdpbf16ps runs at vfmadd's rate (AMD Zen 5: ~1000 against ~450 GFLOP/s
// for the bf16 linears) matmul precision "medium" (matmul.h) moves bf16 weights to
// it; LOOM_FORCE_ISA=avx512_bf16 forces the whole path.
Isa best_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa active_isa() { return active_slot().load(std::memory_order_relaxed); }

std::string isa_name() { return std::string(isa_name(active_isa())); }

bool feature_active(const CpuFeatureInfo& feature) {
  return cpu_features().*feature.present && feature.tier <= active_isa();
}

Status set_forced_isa(std::string_view name) {
  LOOM_ASSIGN_OR_RETURN(Isa isa, resolve_forced(name));
  store(isa);
  return Status::Ok();
}

Status reload_forced_isa_from_env() {
  const char* env = std::getenv("LOOM_FORCE_ISA");
  Result<Isa> isa = resolve_forced(env ? env : "");
  if (!isa.ok()) {
    store(best_isa());
    log_warn(isa.status().message() + "; using " + std::string(isa_name(best_isa())));
    return isa.status();
  }
  store(isa.value());
  return Status::Ok();
}

ScopedIsa::ScopedIsa(Isa isa) : previous_(active_isa()) {
  if (!isa_supported(isa)) {
    throw Error(unsupported("ScopedIsa: this CPU cannot run the " + std::string(isa_name(isa)) + " path"));
  }
  store(isa);
}

ScopedIsa::~ScopedIsa() { store(previous_); }

}  // namespace loom::cpu
