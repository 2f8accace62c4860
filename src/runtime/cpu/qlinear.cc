// Quantized linear driver: x is quantized once per call (per row, per block, on
// all threads), then outputs are split across threads in chunks of weight rows;
// within a chunk, tiles of kQTileRows activation rows pass over each weight block
// while it is in L1, so a tile reads the weights once. Batches of at least
// kAmxMinRows rows go to the tiled GEMM (qgemm.h) on AMX-INT8 where it runs,
// else (from kVnniMinRows) on AVX512-VNNI, else (from kAvx2MinRows) in AVX2.
#include "runtime/cpu/qlinear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loom/core/logging.h"
#include "loom/core/quantize.h"
#include "loom/core/cpu_features.h"
#include "runtime/cpu/qdot_kernels.h"
#include "runtime/cpu/qdot_levels.h"
#include "runtime/cpu/qlevels.h"
#include "runtime/cpu/qgemm.h"
#include "runtime/cpu/qlayout.h"
#include "runtime/cpu/per_thread_scratch.h"
#include "runtime/cpu/share_chunks.h"

namespace loom::cpu::detail {
namespace {

std::atomic<const QdotTable*> g_forced_table{nullptr};

const QdotTable& active_table() {
  if (const QdotTable* forced = g_forced_table.load(std::memory_order_relaxed)) return *forced;
#if defined(LOOM_MATMUL_X86)
  switch (active_isa()) {
    case Isa::kScalar: return qdot_scalar();
    case Isa::kAvx2: return cpu_features().avx_vnni ? qdot_avxvnni() : qdot_avx2();
    case Isa::kAvx512:
    case Isa::kAvx512Bf16: return cpu_features().avx512_vnni ? qdot_avx512vnni() : qdot_avx2();
  }
#endif
  return qdot_scalar();
}

QdotFn kernel_for(const QdotTable& t, DType dt) {
  switch (dt) {
    case DType::kQ8_0: return t.q8_0;
    case DType::kQ4_0: return t.q4_0;
    case DType::kQ4_K: return t.q4_k;
    case DType::kQ5_K: return t.q5_k;
    case DType::kQ6_K: return t.q6_k;
    default:
      if (QdotFn fn = t.levels(dt)) return fn;
      break;
  }
  throw Error(unsupported("linear: no quantized kernel for " + std::string(dtype_name(dt))));
}

// Weight rows per work chunk. Small M: enough rows for a few prefetch distances
// of contiguous stream per chunk, and at least 8 chunks per thread to even out.
// Large M: a chunk's weights (≤ 128 KB) stay in L2 while every row tile passes.
int64_t chunk_rows(int64_t N, size_t row_bytes, int64_t M, int threads) {
  const int64_t by_l2 = std::max<int64_t>(1, static_cast<int64_t>((size_t{128} << 10) / row_bytes));
  const int64_t even = std::max<int64_t>(1, N / (8 * static_cast<int64_t>(threads)));
  return M <= kQTileRows ? std::min<int64_t>(even, std::max<int64_t>(by_l2, 16)) : std::min(by_l2, even);
}

thread_local std::vector<uint8_t> t_act;
thread_local std::vector<int32_t> t_act_offset_sums;
thread_local std::vector<int16_t> t_act_sub_sums;

// Rows of interleaved weights the row kernels get per copy: whole groups (of 8
// rows, every interleaved layout alike), and small enough to stay in L1/L2 between the
// copy and the kernel.
constexpr int64_t kCopiedRows = 32;
static_assert(kCopiedRows % kQ4_0GroupRows == 0 && kCopiedRows % kQ4_KGroupRows == 0 &&
              kCopiedRows % kQ5_KGroupRows == 0 && kCopiedRows % kQ6_KGroupRows == 0 &&
              kCopiedRows % kQ8_0GroupRows == 0);

// From this many rows AMX wins although its tiles are 16 rows and it unpacks
// the weights per call: 2048×2048, 2 threads, at M = 8 it took 0.56 ms for Q4_K
// (row kernels 1.25) and 0.78 for Q8_0 (0.86); at M = 4, 0.74 ms for Q8_0
// against the row kernels' 0.39.
constexpr int64_t kAmxMinRows = 8;
// The VNNI tiles' products cost as much as the row kernels' per row, so they win
// only once the rows share each unpacked weight tile and no lanes are reduced.
constexpr int64_t kVnniMinRows = 8;
// The AVX2 tiles (8 rows) against the AVX2 row kernels, 2048→8192 on 2 threads
// of a Zen 3: at M = 8, Q8_0 2.8 ms (rows 3.2), Q4_0 1.7 (4.1), Q4_K 2.8 (4.1).
constexpr int64_t kAvx2MinRows = 8;

// The best batched path allowed (set_quantized_gemm_limit).
std::atomic<int>& gemm_limit() {
  static std::atomic<int> limit{static_cast<int>(QuantGemm::kAmx)};
  return limit;
}

std::atomic<int>& auto_layout() {
  static std::atomic<int> layout{static_cast<int>(QuantLayout::kAuto)};
  return layout;
}

bool avx512_path() {
#if defined(LOOM_MATMUL_X86)
  return active_isa() >= Isa::kAvx512;
#else
  return false;
#endif
}

bool avx2_path() {
#if defined(LOOM_MATMUL_X86)
  return active_isa() == Isa::kAvx2;
#else
  return false;
#endif
}

// The path a call of M rows takes.
QuantGemm gemm_for(int64_t M) {
  const int limit = gemm_limit().load(std::memory_order_relaxed);
  if (avx512_path()) {
    if (M >= kAmxMinRows && limit >= static_cast<int>(QuantGemm::kAmx) && amx_int8_usable()) return QuantGemm::kAmx;
    if (M >= kVnniMinRows && limit >= static_cast<int>(QuantGemm::kVnni) && avx512_vnni_usable()) {
      return QuantGemm::kVnni;
    }
  } else if (!avx2_path()) {
    return QuantGemm::kRows;
  }
  if (M >= kAvx2MinRows && limit >= static_cast<int>(QuantGemm::kAvx2) && avx2_tiles_usable()) return QuantGemm::kAvx2;
  return QuantGemm::kRows;
}

#if defined(LOOM_MATMUL_X86)
// The decode kernels over groups of 8 interleaved rows run in AVX-512 where the
// path is AVX-512 and the CPU has BW and VNNI, else in AVX2. On a Zen 5 (2 threads,
// 2048->8192 and 8192->2048 from memory, a plain read 57-62 GB/s) the AVX-512 ones
// read at batch 1 Q4_0 at 67-68 GB/s against AVX2's 37-39, Q4_K 71-72 / 46-47,
// Q6_K 68-71 / 48-52, Q8_0 62-67 / 37-57, and at M = 4 1.1-1.8x faster.
bool grouped_avx512() { return avx512_path() && avx512_vnni_usable(); }

// The tiles unpack interleaved groups on every call, for however few rows; the group
// kernels pass over a chunk's weights once per 4 rows, the later passes from L1/L2.
// On a Zen 5 (2 threads, 2048->8192 and 8192->2048, ms per call, tiles / group
// kernels) on AVX-512: M = 8 Q4_K 1.70 / 0.52, Q4_0 0.95 / 0.49, Q8_0 1.46 / 0.93,
// Q6_K 1.84 / 1.21; M = 16 Q4_K 1.45-1.68 / 0.86-1.03, Q6_K 1.85-1.91 / 1.69-1.74,
// Q4_0 and Q8_0 even (each shape wins once); M = 32 Q4_K 2.17-2.30 / 1.37-1.62, the
// others 5-40% faster on the tiles; M = 64 Q4_K 3.3 / 2.6-2.9; M = 512 even. On AVX2
// (same CPU) the group kernels win for Q4_0, Q4_K and Q8_0 at M = 8 and 16 and are
// even at 32; Q6_K's tiles win from 8.
int64_t grouped_tile_min_rows(DType dt) {
  if (grouped_avx512()) return dt == DType::kQ4_K || dt == DType::kQ5_K ? 128 : dt == DType::kQ6_K ? 32 : 16;
  return dt == DType::kQ6_K ? kAvx2MinRows : 32;
}

// Activation rows per call of grouped_kernel_for(dt). Eight for Q4_K on AVX-512 where rows
// are long (down_proj's 8192): on a Zen 4, 8192->2048 took 0.74 ms at M = 8 and 2.14-2.18 at
// M = 32 against 0.79-0.82 and 2.22-2.31 with four rows a call, but 2048->8192 at M = 32 took
// 2.20-2.32 against 2.12-2.17 (matmul_bench 'quant/Q4_K/(2048->8192|8192->2048)/M=(8|32)/AVX512',
// alternating).
int64_t grouped_rows_per_call(DType dt, int64_t blocks) {
  return (dt == DType::kQ4_K || dt == DType::kQ5_K) && grouped_avx512() && blocks >= 16 ? kQ4_Kx8Avx512Rows
                                                                                          : kQTileRows;
}

// The decode kernel over dt's interleaved groups on this path, or null where there is
// none (then the groups are copied out as rows).
QdotFn grouped_kernel_for(DType dt) {
  const bool zmm = grouped_avx512();
  switch (dt) {
    case DType::kQ4_0: return zmm ? qdot_q4_0x8_avx512 : qdot_q4_0x8_avx2;
    case DType::kQ4_K: return zmm ? qdot_q4_Kx8_avx512 : qdot_q4_Kx8_avx2;
    case DType::kQ5_K: return zmm ? qdot_q5_Kx8_avx512 : qdot_q5_Kx8_avx2;
    case DType::kQ6_K: return zmm ? qdot_q6_Kx8_avx512 : qdot_q6_Kx8_avx2;
    case DType::kQ8_0: return zmm ? qdot_q8_0x8_avx512 : qdot_q8_0x8_avx2;
    default: return nullptr;
  }
}
#endif

}  // namespace

const char* quantized_kernels_name() { return active_table().name; }

const char* quantized_gemm_name() {
  switch (gemm_for(std::max({kAmxMinRows, kVnniMinRows, kAvx2MinRows}))) {
    case QuantGemm::kAmx: return "AMX_INT8";
    case QuantGemm::kVnni: return "AVX512_VNNI_TILES";
    case QuantGemm::kAvx2: return "AVX2_TILES";
    case QuantGemm::kRows: break;
  }
  return active_table().name;
}

const QdotTable& active_qdot_table() { return active_table(); }

void force_quantized_kernels(const QdotTable* table) { g_forced_table.store(table, std::memory_order_relaxed); }


void linear_quantized(const float* x, int64_t M, int64_t x_stride, const PackedLinear& w, float* y,
                      int64_t y_stride, ThreadPool& pool) {
  const DType dt = w.weight_dtype();
  const int64_t K = w.in_features(), N = w.out_features();
  const bool k_types = dtype_block_elements(dt) == 256;
  const int64_t blocks = K / dtype_block_elements(dt);
  const size_t act_row_bytes =
      static_cast<size_t>(blocks) * (k_types ? sizeof(ActBlockQ8K) : sizeof(ActBlockQ8x32));
  std::vector<uint8_t>& act = t_act;
  if (act.size() < act_row_bytes * static_cast<size_t>(M)) act.resize(act_row_bytes * static_cast<size_t>(M));
  uint8_t* act_data = act.data();
  void (*q8k)(const float*, ActBlockQ8K*, int64_t) = quantize_activations_q8k;
  void (*q8x32)(const float*, ActBlockQ8x32*, int64_t) = quantize_activations_q8x32;
#if defined(LOOM_MATMUL_X86)
  if (avx512_path()) {
    q8k = quantize_activations_q8k_avx512;
    q8x32 = quantize_activations_q8x32_avx512;
  } else if (avx2_path()) {
    q8k = quantize_activations_q8k_avx2;
    q8x32 = quantize_activations_q8x32_avx2;
  }
#endif
  auto quantize_rows = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* dst = act_data + act_row_bytes * static_cast<size_t>(r);
      if (k_types) {
        q8k(x + r * x_stride, reinterpret_cast<ActBlockQ8K*>(dst), K);
      } else {
        q8x32(x + r * x_stride, reinterpret_cast<ActBlockQ8x32*>(dst), K);
      }
    }
  };
  if (M * K >= (int64_t{1} << 16) && pool.num_threads() > 1) {
    pool.parallel_for(M, [&](int64_t r0, int64_t r1, int) { quantize_rows(r0, r1); });
  } else {
    quantize_rows(0, M);
  }

  // The tiles unpack only the types with kernels of their own; the level types' row
  // kernels decode each weight block once per kQTileRows rows.
  QuantGemm path = is_level_type(dt) ? QuantGemm::kRows : gemm_for(M);
#if defined(LOOM_MATMUL_X86)
  if ((path == QuantGemm::kVnni || path == QuantGemm::kAvx2) && w.quant_group_rows() > 1 &&
      M < grouped_tile_min_rows(dt)) {
    path = QuantGemm::kRows;
  }
#endif
  switch (path) {
    case QuantGemm::kAmx: linear_quantized_amx(act_data, act_row_bytes, M, w, y, y_stride, pool); return;
    case QuantGemm::kVnni: linear_quantized_avx512vnni(act_data, act_row_bytes, M, w, y, y_stride, pool); return;
    case QuantGemm::kAvx2: linear_quantized_avx2(act_data, act_row_bytes, M, w, y, y_stride, pool); return;
    case QuantGemm::kRows: break;
  }
  const QdotTable& table = active_table();
  const QdotFn kernel = kernel_for(table, dt);
  const int group = w.quant_group_rows();
  int64_t chunk = chunk_rows(N, w.quant_row_bytes(), M, pool.num_threads());
  // Chunks start on a group, and at batch 1 hold whole sets of the four outputs the
  // row kernels decode at once: the rest of a chunk runs one output at a time at
  // about half the speed (Q6_K 8192->2048 took chunks of 19 rows, 3 of them alone).
  const int64_t align = std::max<int64_t>(group, M == 1 ? 4 : 1);
  chunk = (chunk + align - 1) / align * align;
  const bool stream = M <= kQTileRows;
  // The call for outputs [n0, n1) with weights at `rows` and x rows from m0.
  auto args_for = [&](const uint8_t* rows, int64_t n0, int64_t n1, int64_t m0, bool streamed) {
    QdotArgs a;
    a.w = rows;
    a.w_row_bytes = w.quant_row_bytes();
    a.outputs = n1 - n0;
    a.blocks = blocks;
    a.act = act_data + act_row_bytes * static_cast<size_t>(m0);
    a.act_row_bytes = act_row_bytes;
    a.m = static_cast<int>(std::min<int64_t>(kQTileRows, M - m0));
    a.y = y + m0 * y_stride + n0;
    a.ldy = y_stride;
    a.bias = w.bias() ? w.bias() + n0 : nullptr;
    a.stream = streamed;
    return a;
  };
  // Rows [n0, n1) stored as rows at `rows` (n0's), all M rows of x.
  auto row_kernels = [&](const uint8_t* rows, int64_t n0, int64_t n1, bool streamed) {
    for (int64_t m0 = 0; m0 < M; m0 += kQTileRows) kernel(args_for(rows, n0, n1, m0, streamed));
  };
  if (group == 1) {
    share_chunks(pool, N, chunk, [&](int64_t n0, int64_t n1) { row_kernels(w.quant_row(n0), n0, n1, stream); });
    return;
  }

  // Interleaved groups (Q4_0x8, Q4_Kx8, Q5_Kx8, Q6_Kx8, Q8_0x8); the rows past the last group are stored as rows.
  const int64_t grouped = N / group * group;
#if defined(LOOM_MATMUL_X86)
  const QdotFn grouped_kernel = &table != &qdot_scalar() ? grouped_kernel_for(dt) : nullptr;
  if (grouped_kernel) {
    // Per activation block, the sums the interleaved kernels subtract (Q4_0: 8·Σq;
    // Q8_0 on AVX-512, whose levels are biased by 128: 128·Σq) or weigh by the mins
    // (Q4_K, Q5_K: per sub-block of 32).
    const bool k4 = dt == DType::kQ4_K || dt == DType::kQ5_K;
    const int32_t level_offset = dt == DType::kQ4_0 ? 8 : dt == DType::kQ8_0 && grouped_avx512() ? 128 : 0;
    std::vector<int32_t>& offset_sums = t_act_offset_sums;
    std::vector<int16_t>& sub_sums = t_act_sub_sums;
    if (level_offset) {
      offset_sums.resize(static_cast<size_t>(M * blocks));
    } else if (k4) {
      sub_sums.resize(static_cast<size_t>(M * blocks * 8));
    }
    for (int64_t r = 0; r < M && (level_offset || k4); ++r) {
      const uint8_t* row = act_data + act_row_bytes * static_cast<size_t>(r);
      for (int64_t b = 0; b < blocks; ++b) {
        const size_t i = static_cast<size_t>(r * blocks + b);
        if (level_offset) {
          int32_t sum = 0;
          for (int8_t q : reinterpret_cast<const ActBlockQ8x32*>(row)[b].qs) sum += q;
          offset_sums[i] = level_offset * sum;
        } else {
          const int16_t* bsums = reinterpret_cast<const ActBlockQ8K*>(row)[b].bsums;
          for (int j = 0; j < 8; ++j) sub_sums[8 * i + j] = static_cast<int16_t>(bsums[2 * j] + bsums[2 * j + 1]);
        }
      }
    }
    const int64_t rows_per_call = grouped_rows_per_call(dt, blocks);
    share_chunks(pool, N, chunk, [&](int64_t n0, int64_t n1) {
      const int64_t g1 = std::min(n1, grouped);
      for (int64_t m0 = 0; n0 < g1 && m0 < M; m0 += rows_per_call) {
        QdotArgs a = args_for(w.quant_row(n0), n0, g1, m0, stream);
        a.m = static_cast<int>(std::min(rows_per_call, M - m0));
        if (level_offset) {
          a.act_offset_sums = offset_sums.data() + static_cast<size_t>(m0 * blocks);
        } else if (k4) {
          a.act_sub_sums = sub_sums.data() + static_cast<size_t>(m0 * blocks * 8);
        }
        grouped_kernel(a);
      }
      if (n1 > grouped) row_kernels(w.quant_row(std::max(n0, grouped)), std::max(n0, grouped), n1, stream);
    });
    return;
  }
#endif
  // Other kernels read rows: copy a few groups out at a time.
  std::vector<std::vector<uint8_t>>& copies = per_thread_scratch<std::vector<uint8_t>>(pool.num_threads());
  for (std::vector<uint8_t>& c : copies) c.resize(static_cast<size_t>(kCopiedRows) * w.quant_row_bytes());
  share_chunks(pool, N, chunk, [&](int64_t n0, int64_t n1, int thread_index) {
    std::vector<uint8_t>& copied = copies[static_cast<size_t>(thread_index)];
    for (int64_t c0 = n0; c0 < n1; c0 += kCopiedRows) {
      const int64_t c1 = std::min(n1, c0 + kCopiedRows);
      if (c0 >= grouped) {
        row_kernels(w.quant_row(c0), c0, c1, stream);
        continue;
      }
      for (int64_t n = c0; n < c1; ++n) {
        uint8_t* dst = copied.data() + static_cast<size_t>(n - c0) * w.quant_row_bytes();
        const uint8_t* src = quant_row_blocks(w, n, 0, blocks, dst);
        if (src != dst) std::memcpy(dst, src, w.quant_row_bytes());
      }
      row_kernels(copied.data(), c0, c1, false);
    }
  });
}

// Every SIMD path decodes through the grouped AVX2 kernels: on a Zen 4 (AVX512-VNNI,
// 2 threads, 2048->8192, plain read 34 GB/s) they read Q8_0 at 35 GB/s against the
// VNNI row kernels' 28, Q4_0 32 / 24, Q4_K 30 / 27, and at M = 4 twice as fast;
// the tiles read the groups as fast as rows from M = 512 and 0-20% slower at M = 32.
// Q5_K too: on a Zen 4 (2 threads, 2048->8192 and 8192->2048 at batch 1, weights in L3:
// matmul_bench's from_l3 cases) its AVX-512 group kernel reads 62-75 GB/s against the VNNI
// row kernel's 29-36, and at M = 4 it is 2.5-3x faster from memory; forced to AVX2 there,
// M = 4 takes half the row kernels' time.
bool decode_prefers_interleaved(DType dt) {
#if defined(LOOM_MATMUL_X86)
  return interleaved_group_rows(dt) > 1 && &active_table() != &qdot_scalar() && grouped_kernel_for(dt) != nullptr;
#else
  return false;
#endif
}

QuantLayout quant_layout_override() { return static_cast<QuantLayout>(auto_layout().load(std::memory_order_relaxed)); }

const QdotTable& qdot_scalar() {
  static const QdotTable t{"SCALAR", qdot_q8_0_scalar, qdot_q4_0_scalar, qdot_q4_K_scalar, qdot_q5_K_scalar,
                           qdot_q6_K_scalar, qdot_levels_scalar_for};
  return t;
}

}  // namespace loom::cpu::detail

namespace loom::cpu {

void set_quantized_gemm_limit(QuantGemm limit) {
  detail::gemm_limit().store(static_cast<int>(limit), std::memory_order_relaxed);
}

Result<QuantGemm> quant_gemm_from_name(std::string_view name) {
  if (name == "amx") return QuantGemm::kAmx;
  if (name == "vnni") return QuantGemm::kVnni;
  if (name == "avx2") return QuantGemm::kAvx2;
  if (name == "rows") return QuantGemm::kRows;
  return invalid_argument("quantized batch path must be amx, vnni, avx2 or rows, got \"" + std::string(name) + "\"");
}

void set_auto_quant_layout(QuantLayout layout) {
  detail::auto_layout().store(static_cast<int>(layout), std::memory_order_relaxed);
}

Result<QuantLayout> quant_layout_from_name(std::string_view name) {
  if (name == "auto") return QuantLayout::kAuto;
  if (name == "rows") return QuantLayout::kRows;
  if (name == "interleaved") return QuantLayout::kInterleaved;
  return invalid_argument("quantized layout must be auto, rows or interleaved, got \"" + std::string(name) + "\"");
}

}  // namespace loom::cpu
