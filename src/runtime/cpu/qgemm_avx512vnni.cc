// AVX512-VNNI engine of the tiled quantized GEMM (qgemm_tiles.h), for CPUs
// without AMX (AMD Zen 4/5, Intel Ice Lake): a zmm holds one output's sums for
// the 16 rows of an activation tile, and vpdpbusd adds, per 4-element group, the
// output's 4 weight bytes (broadcast) times each row's 4 activations. vpdpbusd
// takes one operand unsigned: the weights, stored as level + 128 where levels
// are signed (Q8_0, Q4_0, Q6_K), the product starting from −128·Σx so it ends at
// the exact Σ w·x; Q4_K/Q5_K levels are unsigned already. Per block the 16
// outputs' 16 accumulators stay in registers and no lane is reduced, where the
// row kernels sum each block's lanes horizontally per output and row.
#include "loom/core/cpu_features.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/qgemm.h"

#if defined(LOOM_MATMUL_X86)
#define LOOM_QGEMM_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#include "runtime/cpu/qgemm_tiles.h"
#endif

namespace loom::cpu::detail {

#if defined(LOOM_MATMUL_X86)
namespace {

struct Avx512VnniEngine {
  static bool biased(Kind kind) { return kind != Kind::kQ4_K; }

  struct Scope {
    explicit Scope(int) {}
  };

  template <int k>
  LOOM_QGEMM_TARGET static LOOM_INLINE void dot(const int8_t* w, size_t ws, const uint8_t* x, const int32_t* corr,
                                                int32_t* cb) {
    const __m512i init = corr ? _mm512_loadu_si512(corr) : _mm512_setzero_si512();
    __m512i acc[kTile];
    for (__m512i& a : acc) a = init;
#pragma GCC unroll 8
    for (int g = 0; g < k / 4; ++g) {
      const __m512i xv = _mm512_loadu_si512(x + 64 * g);
#pragma GCC unroll 16
      for (int n = 0; n < kTile; ++n) {
        int32_t four;
        std::memcpy(&four, w + ws * n + 4 * g, 4);
        acc[n] = _mm512_dpbusd_epi32(acc[n], _mm512_set1_epi32(four), xv);
      }
    }
    for (int n = 0; n < kTile; ++n) _mm512_storeu_si512(cb + 16 * n, acc[n]);
  }

  template <int k>
  LOOM_QGEMM_TARGET static LOOM_INLINE void dot4(const int8_t* const* w, size_t ws, const uint8_t* const* x,
                                                 const int32_t* const* corr, int32_t* cb) {
    for (int i = 0; i < 4; ++i) dot<k>(w[i], ws, x[i], corr[i], cb + 256 * i);
  }
};

}  // namespace

bool avx512_vnni_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512_vnni;
}

void linear_quantized_avx512vnni(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w,
                                 float* y, int64_t y_stride, ThreadPool& pool) {
  linear_quantized_tiles<Avx512VnniEngine>(act, act_row_bytes, M, w, y, y_stride, pool);
}

#else

bool avx512_vnni_usable() { return false; }

void linear_quantized_avx512vnni(const uint8_t*, size_t, int64_t, const PackedLinear&, float*, int64_t,
                                 ThreadPool&) {
  throw Error(unsupported("linear: AVX512-VNNI is not available in this build"));
}

#endif

}  // namespace loom::cpu::detail
