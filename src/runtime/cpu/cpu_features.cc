#include "loom/runtime/cpu/cpu_features.h"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <mutex>

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

constexpr int kNoForce = -1;
std::atomic<int> g_forced{kNoForce};

}  // namespace

// highway_target.cc: limits Highway's dispatch to the forced path's targets.
void sync_highway_targets(int forced_isa);

namespace {

// Every change of the forced path goes through here so Highway follows it.
int store_forced(int forced) {
  const int previous = g_forced.exchange(forced, std::memory_order_acq_rel);
  sync_highway_targets(forced);
  return previous;
}

std::once_flag g_env_once;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Parses and checks a forced-path name; "" means no forcing.
Result<int> resolve_forced(std::string_view name) {
  if (name.empty()) return kNoForce;
  LOOM_ASSIGN_OR_RETURN(Isa isa, parse_isa(name));
  if (!isa_supported(isa)) {
    return unsupported("LOOM_FORCE_ISA=" + std::string(name) + ": this CPU cannot run the " +
                       std::string(isa_name(isa)) + " path (features: " + cpu_features_string() + ")");
  }
  return static_cast<int>(isa);
}

void load_env_once() {
  std::call_once(g_env_once, [] {
    Status s = reload_forced_isa_from_env();
    (void)s;  // already logged
  });
}

// Read when the process starts, not when a kernel first asks: code outside the
// runtime that dispatches through Highway (core's quantizers, which a model's load
// runs before any kernel) follows LOOM_FORCE_ISA only once it has been read.
[[maybe_unused]] const bool g_env_read_at_start = (load_env_once(), true);

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string cpu_features_string() {
  const CpuFeatures& f = cpu_features();
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(f.avx, "avx");
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vl, "avx512vl");
  add(f.avx512_vnni, "avx512_vnni");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.avx_vnni, "avx_vnni");
  add(f.amx_tile, "amx_tile");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_int8, "amx_int8");
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
  const CpuFeatures& f = cpu_features();
  const bool avx2 = f.avx2 && f.fma && f.f16c;
  const bool avx512 = avx2 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl;
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return avx2;
    case Isa::kAvx512: return avx512;
    case Isa::kAvx512Bf16: return avx512 && f.avx512_bf16;
  }
  return false;
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

Isa active_isa() {
  load_env_once();
  const int forced = g_forced.load(std::memory_order_acquire);
  return forced == kNoForce ? best_isa() : static_cast<Isa>(forced);
}

std::string isa_name() { return std::string(isa_name(active_isa())); }

Status set_forced_isa(std::string_view name) {
  load_env_once();
  LOOM_ASSIGN_OR_RETURN(int forced, resolve_forced(name));
  store_forced(forced);
  return Status::Ok();
}

Status reload_forced_isa_from_env() {
  const char* env = std::getenv("LOOM_FORCE_ISA");
  Result<int> forced = resolve_forced(env ? env : "");
  if (!forced.ok()) {
    store_forced(kNoForce);
    log_warn(forced.status().message() + "; using " + std::string(isa_name(best_isa())));
    return forced.status();
  }
  store_forced(forced.value());
  return Status::Ok();
}

ScopedIsa::ScopedIsa(Isa isa) {
  load_env_once();
  if (!isa_supported(isa)) {
    throw Error(unsupported("ScopedIsa: this CPU cannot run the " + std::string(isa_name(isa)) + " path"));
  }
  previous_ = store_forced(static_cast<int>(isa));
}

ScopedIsa::~ScopedIsa() { store_forced(previous_); }

}  // namespace loom::cpu
