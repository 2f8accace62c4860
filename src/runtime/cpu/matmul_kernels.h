// The micro-kernels behind loom::cpu::linear, one table per code path. Each tile
// kernel computes a block of at most max_mr rows × one 32-wide weight panel over
// a range of k; the driver (matmul.cc) does blocking, packing and threading.
//
// Invariant every kernel keeps (tests check it bitwise across paths): one f32
// accumulator per output, acc = fma(x[k], w[k], acc) for k in increasing order,
// continuing from C when `accumulate`, and `acc + bias` at the end.
#pragma once

#include <cstdint>

#include "loom/runtime/cpu/matmul.h"

// Kernels are compiled per ISA with function attributes rather than per-file
// flags, so the build needs no ISA options; every function that uses intrinsics
// (including always-inline helpers) carries its path's attribute.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LOOM_MATMUL_X86 1
#define LOOM_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define LOOM_TARGET_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define LOOM_TARGET_AVX512BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define LOOM_INLINE inline __attribute__((always_inline))
#endif

namespace loom::cpu::detail {

constexpr int kNr = PackedLinear::kPanel;
// k-block of the blocked (large-M) path and the fixed row stride of its packed x
// block; 256 × 32 f32 weights = 32 KB, which stays in L1 while every row block of x
// streams past it.
constexpr int kKc = 256;
// Row stride of the packed x block: kKc plus one cache line, so the 12 rows a tile
// broadcasts from do not fall into the same few L1 sets (a 1 KB stride maps every
// fourth row to one set).
constexpr int kXs = kKc + 16;
// How far ahead the streaming (decode) kernels prefetch weights, into L2
// (_MM_HINT_T1). Measured on the 501 MB bf16 lm_head at M = 1, 2 threads, best of
// 30 interleaved with a plain 2-thread read of the same size: no prefetch 19 GB/s,
// 1 KB ahead into L1 22, 4 KB into L1 24-28, 8 KB into L2 29-30 — against 31-32 for
// the plain read. The L2 streamer alone stops at every 4 KB boundary.
constexpr int kStreamPrefetchBytes = 8192;
// Most rows any path's tile handles (AVX-512: 12 rows × 2 zmm = 24 accumulators).
constexpr int kMaxMr = 12;

struct TileArgs {
  // x rows: element (m, k) at a[m * lda + k]; for bf16_dot, a is bf16 bits with k
  // padded to even (pairs read as 32 bits).
  const void* a = nullptr;
  int64_t lda = 0;
  // Weight block: the panel's data advanced to the first k of the block, in the
  // layout the kernel states.
  const void* b = nullptr;
  int64_t k = 0;  // number of k steps (may be odd)
  float* c = nullptr;
  int64_t ldc = 0;
  int mr = 0;       // 1..max_mr rows
  // Streaming path: consecutive panels computed together (b, b + panel_stride,
  // ...; C and bias advance by kNr per panel), so an M = 1 row has 2·panels
  // independent fma chains instead of 2. Only with panels ≤ KernelTable::
  // stream_panels(mr); every output still sees the same fma sequence.
  int panels = 1;
  int64_t panel_stride = 0;  // bytes between the panels' weight blocks
  int n_valid = 0;  // 1..panels·kNr columns of the panel(s) that exist in y
  bool accumulate = false;       // C holds the sum over earlier k blocks
  // Blocked path: a is the driver's packed x block (lda == kXs, compile-time
  // addressing) and b sits in L1; otherwise weights stream from memory.
  bool blocked = false;
  const float* bias = nullptr;   // kNr values added at the end, or null
  // Cache lines to pull into L2 for the next weight block (blocked path) or the
  // next panel group (streaming path with several row tiles), one per loop step
  // from the first, so the fetch is spread over the tile.
  const void* prefetch = nullptr;
  int64_t prefetch_lines = 0;
  // Streaming path: this tile's weights are already in L2 or on their way (an
  // earlier row tile read them, or the previous group's tiles prefetched them),
  // so the kernel does not stream-prefetch ahead of its reads.
  bool weights_in_l2 = false;
  // Blocked path: the next tile's C (same ldc, c_next_rows rows), pulled into L1
  // during this tile. C is reloaded once per k block and is cold by then; without
  // this each tile starts by waiting on 2·mr misses (f32, M = 512, one core:
  // ~105 → ~120 GFLOP/s under the same load).
  const float* c_next = nullptr;
  int c_next_rows = 0;
};
using TileFn = void (*)(const TileArgs&);

struct KernelTable {
  const char* name;
  int max_mr;
  // B f32 [k][kNr]. Used for F32 weights and for widened blocks of the others.
  TileFn f32;
  // B bf16 pairs [ceil(k/2)][kNr][2] / f16 [k][kNr], widened in registers:
  // the small-M (decode) kernels, where weights stream once from memory.
  TileFn bf16;
  TileFn f16;
  // Widen a block of k steps to f32 [k][kNr] (the large-M path: once per block,
  // reused by every row block). src starts at an even k for bf16.
  void (*widen_bf16)(const void* src, int64_t k, float* dst);
  void (*widen_f16)(const void* src, int64_t k, float* dst);
  // vdpbf16ps with x rounded to bf16 (AVX512_BF16 only, else null).
  TileFn bf16_dot = nullptr;
  // Most panels the f32/bf16/f16 streaming tiles take per call for mr rows
  // (TileArgs::panels); null: one.
  int (*stream_panels)(int mr) = nullptr;
};

const KernelTable& kernels_scalar();
const KernelTable& kernels_avx2();
const KernelTable& kernels_avx512();
const KernelTable& kernels_avx512_bf16();

// Benchmark hook (bench/matmul_bench.cc): the row count up to which linear()
// streams weight panels instead of blocking; a negative value restores the
// default. Numerics do not depend on it.
void set_stream_max_rows(int64_t rows);
// Benchmark hook: at most this many panels per streaming tile call (≥ 1), or
// the kernels' own limit when ≤ 0. Numerics do not depend on it.
void set_stream_panels_limit(int panels);
// Benchmark hook: whether threads that finish their share of a layer take
// chunks of the others' (default on), or keep to static equal shares.
void set_work_stealing(bool on);
// Benchmark hook: whether streaming tiles of several row tiles prefetch the next
// panel group over the whole group (default on), or each group's first tile
// streams its weights just ahead of its reads.
void set_stream_group_prefetch(bool on);

// Per-ISA pieces the tables are built from.
void f32_tile_scalar(const TileArgs& t);
void bf16_tile_scalar(const TileArgs& t);
void f16_tile_scalar(const TileArgs& t);
void widen_bf16_scalar(const void* src, int64_t k, float* dst);
void widen_f16_scalar(const void* src, int64_t k, float* dst);

void f32_tile_avx2(const TileArgs& t);
void bf16_tile_avx2(const TileArgs& t);
void f16_tile_avx2(const TileArgs& t);
void widen_bf16_avx2(const void* src, int64_t k, float* dst);
void widen_f16_avx2(const void* src, int64_t k, float* dst);

void f32_tile_avx512(const TileArgs& t);
void bf16_tile_avx512(const TileArgs& t);
void f16_tile_avx512(const TileArgs& t);
void widen_bf16_avx512(const void* src, int64_t k, float* dst);
void widen_f16_avx512(const void* src, int64_t k, float* dst);

int stream_panels_avx512(int mr);

void bf16_dot_tile_avx512bf16(const TileArgs& t);
// Rounds n floats to bf16 (nearest even) and zero-fills up to n_padded.
void round_to_bf16_avx512bf16(const float* src, int64_t n, int64_t n_padded, uint16_t* dst);

}  // namespace loom::cpu::detail
