// AMX-INT8 engine of the tiled quantized GEMM (qgemm_tiles.h): tdpbssd gives
// C[n][m] = Σ_k W[n][k]·X[m][k] (s8 × s8, exact int32) for 16 outputs × 16
// activation rows per tile, over one block or sub-block (32 or 16 elements).
// Tiles 0-3 accumulate, 4-5 hold weights (A), 6-7 activations (B); the four
// products of a pass are issued together and stored for the AVX-512 combination.
#include "runtime/cpu/qgemm.h"

#include "loom/core/cpu_features.h"
#include "runtime/cpu/matmul_kernels.h"

#if defined(LOOM_MATMUL_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#define LOOM_HAVE_AMX 1
#define LOOM_QGEMM_TARGET \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,amx-tile,amx-int8")))
#include "runtime/cpu/qgemm_tiles.h"
#endif

namespace loom::cpu::detail {

#if defined(LOOM_HAVE_AMX)
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The tile products of one pass: C_t = A(w_t)·B(x_t) stored at cb + 256·t.
#define LOOM_AMX_DOT(C, A, B, w, ws, x)  \
  do {                                  \
    _tile_zero(C);                      \
    _tile_loadd(A, (w), (ws));          \
    _tile_loadd(B, (x), 64);            \
    _tile_dpbssd(C, A, B);              \
  } while (0)

struct AmxEngine {
  static bool biased(Kind) { return false; }  // tdpbssd takes signed levels as they are

  // Loads the tile shapes for k-element products; releases the tiles after.
  struct Scope {
    LOOM_QGEMM_TARGET explicit Scope(int k) {
      TileConfig c;
      for (int t = 0; t < 4; ++t) c.rows[t] = kTile, c.colsb[t] = 64;
      for (int t = 4; t < 6; ++t) c.rows[t] = kTile, c.colsb[t] = static_cast<uint16_t>(k);
      for (int t = 6; t < 8; ++t) c.rows[t] = static_cast<uint8_t>(k / 4), c.colsb[t] = 64;
      compiler_barrier();
      _tile_loadconfig(&c);
    }
    LOOM_QGEMM_TARGET ~Scope() { _tile_release(); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
  };

  template <int k>
  LOOM_QGEMM_TARGET static LOOM_INLINE void dot4(const int8_t* const* w, size_t ws, const uint8_t* const* x,
                                                 const int32_t* const*, int32_t* cb) {
    LOOM_AMX_DOT(0, 4, 6, w[0], ws, x[0]);
    LOOM_AMX_DOT(1, 5, 7, w[1], ws, x[1]);
    LOOM_AMX_DOT(2, 4, 6, w[2], ws, x[2]);
    LOOM_AMX_DOT(3, 5, 7, w[3], ws, x[3]);
    _tile_stored(0, cb, 64);
    _tile_stored(1, cb + 256, 64);
    _tile_stored(2, cb + 512, 64);
    _tile_stored(3, cb + 768, 64);
  }

  template <int k>
  LOOM_QGEMM_TARGET static LOOM_INLINE void dot(const int8_t* w, size_t ws, const uint8_t* x, const int32_t*,
                                                int32_t* cb) {
    LOOM_AMX_DOT(0, 4, 6, w, ws, x);
    _tile_stored(0, cb, 64);
  }
};

bool request_tile_data() {
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

}  // namespace

bool amx_int8_usable() {
  static const bool usable = [] {
    const CpuFeatures& f = cpu_features();
    return f.amx_tile && f.amx_int8 && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && request_tile_data();
  }();
  return usable;
}

void linear_quantized_amx(const uint8_t* act, size_t act_row_bytes, int64_t M, const PackedLinear& w, float* y,
                          int64_t y_stride, ThreadPool& pool) {
  linear_quantized_tiles<AmxEngine>(act, act_row_bytes, M, w, y, y_stride, pool);
}

#else

bool amx_int8_usable() { return false; }

void linear_quantized_amx(const uint8_t*, size_t, int64_t, const PackedLinear&, float*, int64_t, ThreadPool&) {
  throw Error(unsupported("linear: AMX-INT8 tiles are not available in this build"));
}

#endif

}  // namespace loom::cpu::detail
