// The integer dot-product kernels behind linear() on quantized weights, one
// table per code path (scalar, AVX2 maddubs, AVX-VNNI and AVX512-VNNI vpdpbusd); the driver
// (qlinear.cc) quantizes activations, splits rows and tiles M.
//
// Invariant every kernel keeps (tests check it bitwise across paths and M): per
// output, for each weight block in increasing order, the block's integer dot
// products are exact int32 sums and combine into one f32 accumulator as
//   Q8_0, Q4_0, Q6_K:  acc = fma(d_w·d_x, isum, acc)
//   Q4_K, Q5_K:        acc = fma(d_w·d_x, Σ_j sc_j·isum_j, acc);
//                      acc = fma(−(dmin_w·d_x), Σ_j m_j·xsum_j, acc)
//   the level types:   as qlevels.h says (the same two steps, one where there is no min)
// then acc + bias. Integers are exact in every ISA, so only these f32 steps round.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "loom/core/quantize.h"
#include "runtime/cpu/matmul_kernels.h"

namespace loom::cpu::detail {

// Activation rows a kernel call pairs with each weight block while it is in L1.
constexpr int kQTileRows = 4;

struct QdotArgs {
  const uint8_t* w = nullptr;  // weight row of the first output
  size_t w_row_bytes = 0;
  int64_t outputs = 0;         // consecutive weight rows (outputs) to compute
  int64_t blocks = 0;          // weight blocks per row (K / block elements)
  // Activation row r's blocks (ActBlockQ8x32 for Q8_0/Q4_0, ActBlockQ8K for the K
  // types) at act + r * act_row_bytes, r < m.
  const uint8_t* act = nullptr;
  size_t act_row_bytes = 0;
  int m = 1;  // 1..kQTileRows (1..kQ4_Kx8Avx512Rows for qdot_q4_Kx8_avx512 and qdot_q5_Kx8_avx512)
  float* y = nullptr;  // output n of activation row r at y[r * ldy + n]
  int64_t ldy = 0;
  const float* bias = nullptr;  // `outputs` values, or null
  // Weights stream from memory (small M): prefetch kStreamPrefetchBytes ahead.
  bool stream = false;
  // The Q4_0x8 kernels and qdot_q8_0x8_avx512 only: Σ qs of each activation block
  // times the level offset the kernel takes off (Q4_0: 8, Q8_0 + 128: 128), row
  // r's at act_offset_sums + r * blocks.
  const int32_t* act_offset_sums = nullptr;
  // The Q4_Kx8 and Q5_Kx8 kernels only: the 8 sub-block sums (32 qs each) of each activation
  // block, row r's at act_sub_sums + r * blocks * 8.
  const int16_t* act_sub_sums = nullptr;
};
using QdotFn = void (*)(const QdotArgs&);

struct QdotTable {
  const char* name;
  QdotFn q8_0, q4_0, q4_k, q5_k, q6_k;
  // The kernel of a type decoded to integer levels (qdot_levels.h), null for others.
  QdotFn (*levels)(DType);
};

// The table linear_quantized uses now (forced by force_quantized_kernels, else by path);
// paged attention's block-type K scores through it as well.
const QdotTable& active_qdot_table();
const QdotTable& qdot_scalar();
const QdotTable& qdot_avx2();
const QdotTable& qdot_avxvnni();
const QdotTable& qdot_avx512vnni();

inline float qdot_step(float acc, float d, int32_t isum) { return std::fma(d, static_cast<float>(isum), acc); }
inline float qdot_finish(float acc, const float* bias, int64_t n) { return bias ? acc + bias[n] : acc; }

template <class Block>
const Block* qdot_weight_row(const QdotArgs& a, int64_t n) {
  return reinterpret_cast<const Block*>(a.w + static_cast<size_t>(n) * a.w_row_bytes);
}
template <class Act>
const Act* qdot_act_row(const QdotArgs& a, int r) {
  return reinterpret_cast<const Act*>(a.act + static_cast<size_t>(r) * a.act_row_bytes);
}

void qdot_q8_0_scalar(const QdotArgs& a);
void qdot_q4_0_scalar(const QdotArgs& a);
void qdot_q4_K_scalar(const QdotArgs& a);
void qdot_q5_K_scalar(const QdotArgs& a);
void qdot_q6_K_scalar(const QdotArgs& a);
#if defined(LOOM_MATMUL_X86)
void qdot_q8_0_avx2(const QdotArgs& a);
void qdot_q4_0_avx2(const QdotArgs& a);
void qdot_q4_K_avx2(const QdotArgs& a);
void qdot_q5_K_avx2(const QdotArgs& a);
void qdot_q6_K_avx2(const QdotArgs& a);
// Q4_0 interleaved in groups of 8 rows (qlayout_q4_0x8.h): a.w is the first
// group, a.outputs a multiple of 8.
void qdot_q4_0x8_avx2(const QdotArgs& a);
// Q4_K interleaved in groups of 8 rows (qlayout_q4_Kx8.h), likewise.
void qdot_q4_Kx8_avx2(const QdotArgs& a);
// Q5_K interleaved in groups of 8 rows (qlayout_q5_Kx8.h), likewise.
void qdot_q5_Kx8_avx2(const QdotArgs& a);
// Q8_0 interleaved in groups of 8 rows (qlayout_q8_0x8.h), likewise.
void qdot_q8_0x8_avx2(const QdotArgs& a);
// Q6_K interleaved in groups of 8 rows (qlayout_q6_Kx8.h), likewise.
void qdot_q6_Kx8_avx2(const QdotArgs& a);
// The x8 kernels over both runs of a pair per zmm, on CPUs with AVX512BW and
// AVX512-VNNI (qdot_x8_avx512.h).
void qdot_q4_0x8_avx512(const QdotArgs& a);
void qdot_q4_Kx8_avx512(const QdotArgs& a);
// qdot_q4_Kx8_avx512 takes up to this many activation rows per call: each group block's
// levels, once unpacked, serve twice the rows of the other kernels (batched decode; the
// driver gives it eight on long rows, grouped_rows_per_call in qlinear.cc).
constexpr int kQ4_Kx8Avx512Rows = 8;
// Q5_K interleaved in groups of 8 rows (qlayout_q5_Kx8.h), as qdot_q4_Kx8_avx512 (up to
// kQ4_Kx8Avx512Rows rows).
void qdot_q5_Kx8_avx512(const QdotArgs& a);
void qdot_q6_Kx8_avx512(const QdotArgs& a);
void qdot_q8_0x8_avx512(const QdotArgs& a);
void qdot_q8_0_avxvnni(const QdotArgs& a);
void qdot_q4_0_avxvnni(const QdotArgs& a);
void qdot_q4_K_avxvnni(const QdotArgs& a);
void qdot_q5_K_avxvnni(const QdotArgs& a);
void qdot_q6_K_avxvnni(const QdotArgs& a);
void qdot_q8_0_avx512vnni(const QdotArgs& a);
// core's quantize_activations_q8x32 / _q8k bit for bit, in AVX2 (qact_avx2.cc).
void quantize_activations_q8x32_avx2(const float* x, ActBlockQ8x32* dst, int64_t n);
void quantize_activations_q8k_avx2(const float* x, ActBlockQ8K* dst, int64_t n);
// core's quantize_activations_q8x32 / _q8k bit for bit, in AVX-512 (qact_avx512.cc).
void quantize_activations_q8x32_avx512(const float* x, ActBlockQ8x32* dst, int64_t n);
void quantize_activations_q8k_avx512(const float* x, ActBlockQ8K* dst, int64_t n);
void qdot_q4_0_avx512vnni(const QdotArgs& a);
void qdot_q4_K_avx512vnni(const QdotArgs& a);
void qdot_q5_K_avx512vnni(const QdotArgs& a);
void qdot_q6_K_avx512vnni(const QdotArgs& a);
#endif

}  // namespace loom::cpu::detail
