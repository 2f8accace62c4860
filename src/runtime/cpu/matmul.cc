// PackedLinear packing and the linear() driver: picks the kernel table of the
// active code path (AVX512_BF16's under matmul precision "medium" or "auto" where
// bf16 dot products are fast), then either
// streams each weight panel over the whole K for all rows (decode and batched
// decode; the bf16 dot path at every M, 128 rows per pass) or blocks over k and
// rows with weights widened once per block (prefill). Both give bitwise the same
// result; see matmul_kernels.h for the kernels' contract. oneDNN and OpenBLAS
// versions of this layer live in matmul_baselines.h for the benchmark only: they
// are not faster (Xeon: f32 prefill within noise, bf16 prefill 1.6-1.8x slower,
// decode slower; Zen 5, bf16 dot products at M = 512: oneDNN 965 GFLOP/s against
// loom's 955-1010) and their summation order depends on M.
#include "loom/runtime/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "loom/core/file_pages.h"
#include "loom/core/logging.h"
#include "loom/core/cpu_features.h"
#include "runtime/cpu/matmul_kernels.h"
#include "runtime/cpu/pack_panel_words.h"
#include "runtime/cpu/qlayout.h"
#include "runtime/cpu/qlinear.h"
#include "runtime/cpu/per_thread_scratch.h"
#include "runtime/cpu/share_chunks.h"

namespace loom::cpu {
namespace {

using detail::kKc;
using detail::kXs;
using detail::kNr;
using detail::KernelTable;
using detail::TileArgs;
using detail::TileFn;

// When linear() streams every weight panel from memory (one tile of rows after
// another over the whole K, the panel re-read from L2 by each) instead of blocking
// over k with x packed and weights widened per block. Measured with
// bench/matmul_bench.cc rows/… and a wider sweep (2 threads, GFLOP/s, stream vs
// blocked): at M ≤ 16 streaming wins everywhere (bf16 2048→8192 M=1 37/22, M=16
// 197/146); bf16/f16 keep winning up to M = 128 while a panel fits in L2 (bf16
// 2048→8192 M=32 218/180, M=128 204/202; K=14336 M=96 229/203), f32 does not
// (2048→8192 equal within noise; K=14336, 1.8 MB panels, M=32 193/219).
constexpr int64_t kStreamMaxRows = 16;
constexpr int64_t kStreamMaxRowsWidening = 128;
std::atomic<int64_t> g_stream_max_rows{-1};  // bench override; -1: the rule below
std::atomic<int> g_stream_panels_limit{0};   // bench override; 0: the kernels' limit
std::atomic<bool> g_stream_group_prefetch{true};  // bench override: false streams each group on demand

// The vdpbf16ps path streams at every M, this many rows per pass over the weights:
// its tile reads bf16 weights as they are packed, so blocking saves no widening,
// and a pass's x (128 rows × K bf16, 512 KB at K = 2048) stays in L2 while the
// panels stream past. AMD Zen 5, 2 threads, GFLOP/s: 2048→8192 streamed at M = 64
// and 128: 1033, 1035, blocked 878, 905, and 787-806 at M = 512; 8192→2048: 1015,
// 1013 against 873, 904.
constexpr int64_t kDotStreamRows = 128;

int64_t stream_max_rows(const PackedLinear& w, bool dot) {
  const int64_t forced = g_stream_max_rows.load(std::memory_order_relaxed);
  if (forced >= 0) return forced;
  if (dot) return std::numeric_limits<int64_t>::max();
  if (w.weight_dtype() == DType::kF32) return kStreamMaxRows;
  const int64_t l2 = cpu_features().l2_cache_bytes > 0 ? cpu_features().l2_cache_bytes : int64_t{1} << 20;
  return static_cast<int64_t>(w.panel_stride_bytes()) <= l2 / 2 ? kStreamMaxRowsWidening : kStreamMaxRows;
}

// Rows of x packed per block in the large-M path: 192 × kKc f32 = 192 KB of x in
// L2 per k block, reused by every weight panel of the thread.
constexpr int64_t kMc = 192;
// Work-sharing chunks per thread in the blocked path. Each chunk re-reads the
// packed x from L3/DRAM for every row and k block, stalling its first panel, so
// chunks stay large (a thread used to read x once for its whole share): two per
// thread still leaves a late or descheduled thread's second half to the others.
constexpr int64_t kBlockedChunksPerThread = 2;

// The process's first precision: LOOM_MATMUL_PRECISION, else auto.
int initial_precision() {
  const char* env = std::getenv("LOOM_MATMUL_PRECISION");
  if (!env || !*env) return static_cast<int>(MatmulPrecision::kAuto);
  const Result<MatmulPrecision> p = matmul_precision_from_name(env);
  if (!p.ok()) {
    log_warn("LOOM_MATMUL_PRECISION: " + p.status().message() + "; using auto");
    return static_cast<int>(MatmulPrecision::kAuto);
  }
  return static_cast<int>(p.value());
}
// Read on first use, not at static initialization (logging may not be ready then).
std::atomic<int>& precision_slot() {
  static std::atomic<int> precision{initial_precision()};
  return precision;
}

// The code path linear() runs: the active one, moved up to AVX512_BF16 when medium
// or auto precision permits bf16 dot products and the CPU has fast ones.
Isa matmul_isa() {
  static const bool fast_bf16_dot = isa_supported(Isa::kAvx512Bf16) && cpu_features().fast_bf16_dot;
  const Isa isa = active_isa();
  if (isa != Isa::kAvx512 || !fast_bf16_dot) return isa;
  const MatmulPrecision p = matmul_precision();
  return p == MatmulPrecision::kMedium || p == MatmulPrecision::kAuto ? Isa::kAvx512Bf16 : isa;
}

const KernelTable& table_for(Isa isa) {
#if defined(LOOM_MATMUL_X86)
  switch (isa) {
    case Isa::kScalar: return detail::kernels_scalar();
    case Isa::kAvx2: return detail::kernels_avx2();
    case Isa::kAvx512: return detail::kernels_avx512();
    case Isa::kAvx512Bf16: return detail::kernels_avx512_bf16();
  }
#endif
  (void)isa;
  return detail::kernels_scalar();
}

// Per-thread scratch that grows and is then reused across calls (decode calls
// linear() hundreds of times per token; no allocation in steady state).
class Scratch {
 public:
  void* get(size_t bytes) {
    if (bytes > size_) {
      buf_ = allocate_aligned(bytes);
      size_ = bytes;
    }
    return buf_.get();
  }

 private:
  std::shared_ptr<void> buf_;
  size_t size_ = 0;
};

// Filled by the calling thread.
struct CallerScratch {
  Scratch x_bf16;  // x rounded to bf16 (AVX512_BF16 path)
  Scratch x_pack;  // x in k blocks (large-M path), read by all threads
};
thread_local CallerScratch t_scratch;

// Of one thread index (per_thread_scratch), grown by the caller before the region.
struct BlockScratch {
  Scratch x_block;  // packed x rows (large-M path)
  Scratch w_block;  // widened weight block
};

struct Problem {
  const float* x;
  int64_t M, x_stride;
  const PackedLinear* w;
  float* y;
  int64_t y_stride;
  const KernelTable* kt;
  const uint16_t* x_bf16;  // non-null on the vdpbf16ps path
  int64_t x_bf16_stride;
  // Blocked path: x packed once per call, k block b of row m at
  // xpack[(b·M + m)·kXs], shared by all threads; null: each thread packs its own.
  const float* xpack = nullptr;
};

// Rows [m_begin, m_end) × panels [p0, p1), each panel over the whole K one row
// tile after another: weights read from memory once, then from L2.
void stream_panels(const Problem& pb, int64_t m_begin, int64_t m_end, int64_t p0, int64_t p1) {
  const PackedLinear& w = *pb.w;
  const DType dt = w.weight_dtype();
  const int64_t N = w.out_features(), K = w.in_features();
  TileFn fn = dt == DType::kF32 ? pb.kt->f32 : dt == DType::kF16 ? pb.kt->f16 : pb.x_bf16 ? pb.kt->bf16_dot : pb.kt->bf16;
  // Panels per group: as many as the first (largest) row tile may take, so a
  // group's weights stay in L2 for the row tiles after it as a single panel did.
  // Row tiles of balanced sizes (32 rows: 11+11+10, not 12+12+8): a short last tile
  // widens the same weights for fewer multiply-adds. Tile sizes never change a result.
  const int64_t rows = m_end - m_begin;
  if (rows <= 0) return;
  const int64_t tiles = (rows + pb.kt->max_mr - 1) / pb.kt->max_mr;
  const int64_t base_mr = rows / tiles, extra = rows % tiles;
  const int first_mr = static_cast<int>(base_mr + (extra > 0 ? 1 : 0));
  int group = pb.kt->stream_panels ? pb.kt->stream_panels(first_mr) : 1;
  if (const int limit = g_stream_panels_limit.load(std::memory_order_relaxed); limit > 0) group = std::min(group, limit);
  const int64_t panel_stride = static_cast<int64_t>(w.panel_stride_bytes());
  // Tiles take 1, 2 or 4 panels.
  auto group_at = [&](int64_t p) {
    const int64_t left = p1 - p;
    return group >= 4 && left >= 4 ? 4 : group >= 2 && left >= 2 ? 2 : 1;
  };
  // With several row tiles, only the first reads a group's weights from memory,
  // and prefetching just ahead of its reads asks for all of them in a third (at
  // 3 tiles) of the group's time: ~27 GB/s for two threads, more than this
  // machine's memory gives. Instead every tile of a group pulls an equal share of
  // the next group into L2, so the weights arrive at the pace of the whole group.
  // Only while two groups and the x rows fit in half of L2 together (8192→2048 at
  // 32 rows: 1 MB of x, 512 KB panels, measured slower with it).
  const int64_t l2 = cpu_features().l2_cache_bytes > 0 ? cpu_features().l2_cache_bytes : int64_t{1} << 20;
  const bool spread = tiles > 1 && 2 * group * panel_stride + rows * K * 4 <= l2 / 2 &&
                      g_stream_group_prefetch.load(std::memory_order_relaxed);
  for (int64_t p = p0; p < p1;) {
    const int np = group_at(p);
    const int64_t next = p + np;
    const int64_t next_lines = next < p1 ? group_at(next) * panel_stride / 64 : 0;
    for (int64_t i = 0, m0 = m_begin; i < tiles; m0 += base_mr + (i < extra ? 1 : 0), ++i) {
      TileArgs t;
      if (spread) {
        t.weights_in_l2 = p > p0 || i > 0;
        const int64_t l0 = i * next_lines / tiles, l1 = (i + 1) * next_lines / tiles;
        t.prefetch = w.panel(next < p1 ? next : p) + 64 * l0;
        t.prefetch_lines = l1 - l0;
      }
      if (pb.x_bf16) {
        t.a = pb.x_bf16 + m0 * pb.x_bf16_stride;
        t.lda = pb.x_bf16_stride;
      } else {
        t.a = pb.x + m0 * pb.x_stride;
        t.lda = pb.x_stride;
      }
      t.b = w.panel(p);
      t.k = K;
      t.c = pb.y + m0 * pb.y_stride + p * kNr;
      t.ldc = pb.y_stride;
      t.mr = static_cast<int>(base_mr + (i < extra ? 1 : 0));
      t.panels = np;
      t.panel_stride = panel_stride;
      t.n_valid = static_cast<int>(std::min<int64_t>(np * kNr, N - p * kNr));
      t.bias = w.bias() ? w.bias() + p * kNr : nullptr;
      fn(t);
    }
    p += np;
  }
}

// Rows [m_begin, m_end) × panels [p0, p1), blocked: for each block of rows and of
// k, x is packed at stride kXs and each panel's k block is widened to f32 once,
// then swept by every row tile while it sits in L1.
size_t x_block_bytes(const Problem& pb) {
  const int max_mr = pb.kt->max_mr;
  return sizeof(float) * static_cast<size_t>(std::max<int64_t>(max_mr, kMc / max_mr * max_mr) * kXs);
}
size_t w_block_bytes() { return sizeof(float) * kKc * kNr; }

// The blocked path's buffers for each of the pool's thread indices, grown here on
// the calling thread.
std::vector<BlockScratch>& block_scratches(const Problem& pb, int threads) {
  std::vector<BlockScratch>& all = detail::per_thread_scratch<BlockScratch>(threads);
  for (BlockScratch& s : all) {
    if (!pb.x_bf16 && !pb.xpack) s.x_block.get(x_block_bytes(pb));
    s.w_block.get(w_block_bytes());
  }
  return all;
}

void blocked(const Problem& pb, BlockScratch& scratch, int64_t m_begin, int64_t m_end, int64_t p0, int64_t p1) {
  const PackedLinear& w = *pb.w;
  const DType dt = w.weight_dtype();
  const int64_t N = w.out_features(), K = w.in_features();
  const int max_mr = pb.kt->max_mr;
  const int64_t mc = std::max<int64_t>(max_mr, kMc / max_mr * max_mr);
  float* xblk = pb.x_bf16 || pb.xpack ? nullptr : static_cast<float*>(scratch.x_block.get(x_block_bytes(pb)));
  float* wblk = static_cast<float*>(scratch.w_block.get(w_block_bytes()));
  // Packed bytes per k step of a panel (bf16 pairs: 2 bytes per k and column).
  const int64_t k_bytes = dt == DType::kF32 ? kNr * 4 : kNr * 2;
  for (int64_t mb = m_begin; mb < m_end; mb += mc) {
    const int64_t rows = std::min(mc, m_end - mb);
    const int64_t tiles = (rows + max_mr - 1) / max_mr;
    for (int64_t kb = 0; kb < K; kb += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, K - kb);
      const bool last = kb + kc == K;
      const int64_t block_lines = ((kc + 1) / 2 * 2 * k_bytes + 63) / 64;
      const float* xb = xblk;
      if (xblk) {
        for (int64_t r = 0; r < rows; ++r) {
          std::memcpy(xblk + r * kXs, pb.x + (mb + r) * pb.x_stride + kb, sizeof(float) * kc);
        }
      } else if (pb.xpack) {
        xb = pb.xpack + (kb / kKc * pb.M + mb) * kXs;
      }
      for (int64_t p = p0; p < p1; ++p) {
        const uint8_t* src = w.panel(p) + kb * k_bytes;  // kb is even, so bf16 pairs start here
        TileFn fn = pb.kt->f32;
        const void* b = src;
        if (pb.x_bf16) {
          fn = pb.kt->bf16_dot;
        } else if (dt == DType::kBF16) {
          pb.kt->widen_bf16(src, kc, wblk);
          b = wblk;
        } else if (dt == DType::kF16) {
          pb.kt->widen_f16(src, kc, wblk);
          b = wblk;
        }
        // The next panel's block comes from L3/DRAM: each row tile pulls a share
        // of it into L2, one line per k step, so the first tile of every block
        // does not stall on it (f32 weights, M = 512, one core: 128 → 142
        // GFLOP/s; prefetching it in bursts between tiles only reached 135).
        const uint8_t* next = p + 1 < p1 ? w.panel(p + 1) + kb * k_bytes : nullptr;
        for (int64_t m0 = 0, tile = 0; m0 < rows; m0 += max_mr, ++tile) {
          TileArgs t;
          if (next) {
            const int64_t l0 = tile * block_lines / tiles, l1 = (tile + 1) * block_lines / tiles;
            t.prefetch = next + 64 * l0;
            t.prefetch_lines = l1 - l0;
          }
          if (pb.x_bf16) {
            t.a = pb.x_bf16 + (mb + m0) * pb.x_bf16_stride + kb;
            t.lda = pb.x_bf16_stride;
          } else {
            t.a = xb + m0 * kXs;
            t.lda = kXs;
          }
          t.b = b;
          t.k = kc;
          t.c = pb.y + (mb + m0) * pb.y_stride + p * kNr;
          t.ldc = pb.y_stride;
          t.mr = static_cast<int>(std::min<int64_t>(max_mr, rows - m0));
          t.n_valid = static_cast<int>(std::min<int64_t>(kNr, N - p * kNr));
          t.accumulate = kb > 0;
          t.blocked = !pb.x_bf16;
          t.weights_in_l2 = pb.x_bf16 != nullptr;  // the dot tile reads the block where it lies
          if (m0 + max_mr < rows) {
            t.c_next = t.c + max_mr * pb.y_stride;
            t.c_next_rows = static_cast<int>(std::min<int64_t>(max_mr, rows - m0 - max_mr));
          }
          t.bias = last && w.bias() ? w.bias() + p * kNr : nullptr;
          fn(t);
        }
      }
    }
  }
}

[[noreturn]] void fail(const std::string& message) { throw Error(invalid_argument(message)); }

}  // namespace

namespace detail {
void set_stream_max_rows(int64_t rows) { g_stream_max_rows.store(rows < 0 ? -1 : rows); }
void set_stream_panels_limit(int panels) { g_stream_panels_limit.store(panels > 0 ? panels : 0); }
void set_work_stealing(bool on) { g_work_stealing.store(on); }
void set_stream_group_prefetch(bool on) { g_stream_group_prefetch.store(on); }
}  // namespace detail

void set_matmul_precision(MatmulPrecision precision) {
  precision_slot().store(static_cast<int>(precision), std::memory_order_relaxed);
}
MatmulPrecision matmul_precision() {
  return static_cast<MatmulPrecision>(precision_slot().load(std::memory_order_relaxed));
}

const char* matmul_precision_name(MatmulPrecision precision) {
  switch (precision) {
    case MatmulPrecision::kHighest: return "highest";
    case MatmulPrecision::kHigh: return "high";
    case MatmulPrecision::kMedium: return "medium";
    case MatmulPrecision::kAuto: return "auto";
  }
  return "?";
}

Result<MatmulPrecision> matmul_precision_from_name(std::string_view name) {
  for (MatmulPrecision p :
       {MatmulPrecision::kHighest, MatmulPrecision::kHigh, MatmulPrecision::kMedium, MatmulPrecision::kAuto}) {
    if (name == matmul_precision_name(p)) return p;
  }
  return invalid_argument("matmul precision must be highest, high, medium or auto, got \"" + std::string(name) +
                          "\"");
}

bool bf16_dot_products_active() { return matmul_isa() == Isa::kAvx512Bf16; }

namespace {
// Panel p (rows of it, < kNr in the last one) of a float weight in the kernels' order:
// F32 and F16 element k of row j at k·kNr + j, BF16 pairs (k = 2kp + s) at
// (kp·kNr + j)·2 + s; zeros past N and K.
void pack_panel_any(const Tensor& weight, DType dt, int64_t p, int64_t rows, int64_t K, int64_t k_pairs, uint8_t* dst) {
  if (dt == DType::kF32) {
    const float* src = weight.data_as<const float>() + p * kNr * K;
    float* d = reinterpret_cast<float*>(dst);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < kNr; ++j) d[k * kNr + j] = j < rows ? src[j * K + k] : 0.0f;
    }
  } else if (dt == DType::kF16) {
    const uint16_t* src = weight.data_as<const uint16_t>() + p * kNr * K;
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t j = 0; j < kNr; ++j) d[k * kNr + j] = j < rows ? src[j * K + k] : 0;
    }
  } else {
    const uint16_t* src = weight.data_as<const uint16_t>() + p * kNr * K;
    uint16_t* d = reinterpret_cast<uint16_t*>(dst);
    for (int64_t kp = 0; kp < k_pairs; ++kp) {
      for (int64_t j = 0; j < kNr; ++j) {
        for (int64_t s = 0; s < 2; ++s) {
          const int64_t k = 2 * kp + s;
          d[(kp * kNr + j) * 2 + s] = (j < rows && k < K) ? src[j * K + k] : 0;
        }
      }
    }
  }
}
}  // namespace

Result<PackedLinear::Layout> PackedLinear::layout_for(const Tensor& weight, QuantLayout layout) {
  if (!weight.defined()) return invalid_argument("PackedLinear::pack: weight tensor is undefined");
  if (weight.rank() != 2) {
    return invalid_argument("PackedLinear::pack: weight must be [out_features, in_features], got " +
                            weight.describe());
  }
  const DType dt = weight.dtype();
  if (dt != DType::kF32 && dt != DType::kBF16 && dt != DType::kF16 && !dtype_is_quantized(dt)) {
    return unsupported("PackedLinear::pack: weight dtype " + std::string(dtype_name(dt)) +
                       " is not supported (F32, BF16, F16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), got " + weight.describe());
  }
  const int64_t N = weight.dim(0), K = weight.dim(1);
  if (N < 1 || K < 1) return invalid_argument("PackedLinear::pack: empty weight " + weight.describe());
  if (weight.data() == nullptr) return invalid_argument("PackedLinear::pack: weight " + weight.describe() + " has no data");
  Layout out;
  if (dtype_is_quantized(dt)) {
    // Quantized rows stay as stored (the kernels read whole blocks of a row).
    if (K % dtype_block_elements(dt) != 0) {
      return invalid_argument("PackedLinear::pack: in_features " + std::to_string(K) + " is not a multiple of " +
                              std::string(dtype_name(dt)) + "'s block of " +
                              std::to_string(dtype_block_elements(dt)) + ", got " + weight.describe());
    }
    out.row_bytes = dtype_bytes(dt, K);
    const int group_rows = detail::interleaved_group_rows(dt);
    if (group_rows > 1 && N >= group_rows) {
      if (layout == QuantLayout::kAuto) layout = detail::quant_layout_override();
      // Automatically only over a file's mapping, whose pages the copy replaces: a
      // tensor in memory (quantized at load) would be held twice.
      if (layout == QuantLayout::kInterleaved ||
          (layout == QuantLayout::kAuto && detail::decode_prefers_interleaved(dt) &&
           in_file_mapping(weight.data(), weight.nbytes()))) {
        out.group_rows = group_rows;
        out.data_bytes = out.row_bytes * static_cast<size_t>(N);
      }
    }
  } else {
    const int64_t panels = (N + kPanel - 1) / kPanel;
    out.panel_bytes = dt == DType::kF32 ? static_cast<size_t>(K) * kNr * 4
                      : dt == DType::kF16 ? static_cast<size_t>(K) * kNr * 2
                                          : static_cast<size_t>((K + 1) / 2) * kNr * 4;
    out.data_bytes = out.panel_bytes * static_cast<size_t>(panels);
  }
  return out;
}

namespace {
Status check_bias(const Tensor& weight, const Tensor* bias) {
  const int64_t N = weight.dim(0);
  if (bias && (!bias->defined() || bias->rank() != 1 || bias->dim(0) != N || !dtype_is_float(bias->dtype()) ||
               bias->data() == nullptr)) {
    return invalid_argument("PackedLinear::pack: bias must be a float tensor [" + std::to_string(N) +
                            "] for weight " + weight.describe() + ", got " + bias->describe());
  }
  return Status::Ok();
}
}  // namespace

void PackedLinear::adopt_layout(const Tensor& weight, const Tensor* bias, const Layout& layout) {
  n_ = weight.dim(0);
  k_ = weight.dim(1);
  dtype_ = weight.dtype();
  panel_bytes_ = layout.panel_bytes;
  row_bytes_ = layout.row_bytes;
  group_rows_ = layout.group_rows;
  bytes_ = layout.data_bytes;
  copied_ = layout.copied();
  if (bias) {
    const size_t padded = static_cast<size_t>(num_panels()) * kNr;
    bias_ = allocate_aligned(padded * sizeof(float));
    float* b = static_cast<float*>(bias_.get());
    convert_elements(bias->data(), bias->dtype(), b, DType::kF32, static_cast<size_t>(n_));
    std::fill(b + n_, b + padded, 0.0f);
    bytes_ += padded * sizeof(float);
  }
}

size_t PackedLinear::streamed_weight_bytes() const {
  if (data_ == nullptr) return 0;
  // Quantized groups take the bytes their rows would (quant_row).
  if (row_bytes_ > 0) return row_bytes_ * static_cast<size_t>(n_);
  return panel_bytes_ * static_cast<size_t>(num_panels());
}

Result<PackedLinear> PackedLinear::from_packed(const Tensor& weight, const Tensor* bias, const Layout& layout,
                                               std::shared_ptr<void> packed) {
  const QuantLayout choice = layout.group_rows > 1 ? QuantLayout::kInterleaved : QuantLayout::kRows;
  LOOM_ASSIGN_OR_RETURN(const Layout expected, layout_for(weight, choice));
  if (!layout.copied() || !packed || expected.group_rows != layout.group_rows ||
      expected.panel_bytes != layout.panel_bytes || expected.row_bytes != layout.row_bytes ||
      expected.data_bytes != layout.data_bytes) {
    return invalid_argument("PackedLinear::from_packed: the packed bytes are not pack()'s layout of " +
                            weight.describe());
  }
  LOOM_RETURN_IF_ERROR(check_bias(weight, bias));
  PackedLinear out;
  out.adopt_layout(weight, bias, layout);
  out.data_ = std::move(packed);
  return out;
}

Result<PackedLinear> PackedLinear::pack(const Tensor& weight, const Tensor* bias, QuantLayout layout_choice,
                                        std::shared_ptr<void> storage) {
  LOOM_ASSIGN_OR_RETURN(const Layout layout, layout_for(weight, layout_choice));
  LOOM_RETURN_IF_ERROR(check_bias(weight, bias));
  if (storage && !layout.copied()) {
    return invalid_argument("PackedLinear::pack: storage given for " + weight.describe() + ", which is read in place");
  }
  const DType dt = weight.dtype();
  const int64_t N = weight.dim(0), K = weight.dim(1);
  PackedLinear out;
  out.adopt_layout(weight, bias, layout);
  const int64_t panels = out.num_panels();
  if (dtype_is_quantized(dt)) {
    if (layout.group_rows > 1) {
      // A copy in groups of rows; the rows past the last group as they are.
      const int group_rows = layout.group_rows;
      const int64_t groups = N / group_rows, blocks = K / dtype_block_elements(dt);
      const size_t group_bytes = out.row_bytes_ * group_rows, total = layout.data_bytes;
      out.data_ = storage ? std::move(storage) : allocate_streamed(total);
      const auto* src = static_cast<const uint8_t*>(weight.data());
      auto* dst = static_cast<uint8_t*>(out.data_.get());
      ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1, int) {
        // Released a run of groups at a time (resident once, as the panels below): one
        // madvise per 9 KB group made loading the 1B Q4_0 file take 1.8 s.
        constexpr int64_t kReleaseGroups = 64;
        for (int64_t r0 = g0; r0 < g1; r0 += kReleaseGroups) {
          const int64_t r1 = std::min(g1, r0 + kReleaseGroups);
          prefault_file_pages(src + group_bytes * r0, group_bytes * (r1 - r0));
          for (int64_t g = r0; g < r1; ++g) {
            detail::interleave_group(dt, src + group_bytes * g, out.row_bytes_, blocks, dst + group_bytes * g);
          }
          release_file_pages(src + group_bytes * r0, group_bytes * (r1 - r0));
        }
      });
      const size_t tail = group_bytes * groups;
      std::memcpy(dst + tail, src + tail, total - tail);
      release_file_pages(src, total);
    } else {
      // Read in place (a GGUF file's mapping, or the tensor quantized at load), so the
      // weights are resident once. Against a copy into huge-page memory, measured on the
      // 1B Q4_0 file (2 threads, Xeon): decode 22.2 vs 22.5 tok/s, load 0.02 vs 1.45 s,
      // peak RSS 0.85 vs 1.73 GB.
      out.data_ = std::shared_ptr<void>(std::make_shared<Tensor>(weight), weight.data());
    }
  } else {
    const int64_t k_pairs = (K + 1) / 2;
    // read start to end every decode step
    out.data_ = storage ? std::move(storage) : allocate_streamed(layout.data_bytes);
    // Transposes 32-row blocks; panels are independent, so loading a model packs
    // on all threads.
    const size_t elt = dtype_size(dt);
    auto* transpose_words = detail::transpose_panel_words_scalar;
#if defined(LOOM_MATMUL_X86)
    if (const Isa isa = matmul_isa(); isa == Isa::kAvx512 || isa == Isa::kAvx512Bf16)
      transpose_words = detail::transpose_panel_words_avx512;
#endif
    ThreadPool::global().parallel_for(panels, [&](int64_t p0, int64_t p1, int) {
      // The packed copy replaces the source: a checkpoint's mapped pages need not stay
      // resident beside it (weights resident once), nor pile up while a large tensor
      // (the LM head) is packed. Released a run of panels at a time: each madvise
      // flushes the TLB of every thread (per panel it was a fifth of loading the 1B
      // bf16 file).
      constexpr int64_t kReleasePanels = 16;
      for (int64_t r0 = p0; r0 < p1; r0 += kReleasePanels) {
        const int64_t r1 = std::min(p1, r0 + kReleasePanels);
        const int64_t end_row = std::min<int64_t>(N, r1 * kNr);
        const auto* run = static_cast<const uint8_t*>(weight.data()) + static_cast<size_t>(r0 * kNr * K) * elt;
        const size_t run_bytes = static_cast<size_t>((end_row - r0 * kNr) * K) * elt;
        prefault_file_pages(run, run_bytes);
        for (int64_t p = r0; p < r1; ++p) {
          uint8_t* dst = static_cast<uint8_t*>(out.data_.get()) + out.panel_bytes_ * p;
          const int64_t rows = std::min<int64_t>(kNr, N - p * kNr);
          if (dt == DType::kF32 || dt == DType::kF16 || K % 2 != 0 || rows < kNr) {
            pack_panel_any(weight, dt, p, rows, K, k_pairs, dst);
          } else {
            // BF16 pairs are one 32-bit word of a row: a transposition of words.
            transpose_words(reinterpret_cast<const uint32_t*>(weight.data_as<const uint16_t>() + p * kNr * K),
                            k_pairs, reinterpret_cast<uint32_t*>(dst));
          }
        }
        release_file_pages(run, run_bytes);
      }
    });
    release_file_pages(weight.data(), weight.nbytes());  // the pages panels shared
  }

  return out;
}

void PackedLinear::weight_row(int64_t n, float* out) const {
  if (empty()) fail("PackedLinear::weight_row: the PackedLinear is empty (never packed)");
  if (n < 0 || n >= n_) fail("PackedLinear::weight_row: row " + std::to_string(n) + " outside [0, " + std::to_string(n_) + ")");
  if (dtype_is_quantized(dtype_)) {
    // The row's blocks as stored (copied out of an interleaved group), dequantized.
    const int64_t blocks = k_ / dtype_block_elements(dtype_);
    thread_local std::vector<uint8_t> scratch;  // a lookup per token: no allocation each time
    scratch.resize(row_bytes_);
    const uint8_t* row = detail::quant_row_blocks(*this, n, 0, blocks, scratch.data());
    convert_elements(row, dtype_, out, DType::kF32, static_cast<size_t>(k_));
    return;
  }
  // Panels hold row n's elements kNr apart (F32, F16) or in pairs 2·kNr apart (BF16).
  const uint8_t* p = panel(n / kNr);
  const int64_t j = n % kNr;
  if (dtype_ == DType::kF32) {
    const float* src = reinterpret_cast<const float*>(p);
    for (int64_t k = 0; k < k_; ++k) out[k] = src[k * kNr + j];
    return;
  }
  thread_local std::vector<uint16_t> bits;
  bits.resize(static_cast<size_t>(k_));
  const uint16_t* src = reinterpret_cast<const uint16_t*>(p);
  for (int64_t k = 0; k < k_; ++k) {
    bits[static_cast<size_t>(k)] = dtype_ == DType::kF16 ? src[k * kNr + j] : src[((k / 2) * kNr + j) * 2 + k % 2];
  }
  convert_elements(bits.data(), dtype_, out, DType::kF32, static_cast<size_t>(k_));
}

void linear(const float* x, int64_t M, int64_t x_stride, const PackedLinear& w, float* y, int64_t y_stride,
            ThreadPool& pool) {
  if (M < 0) fail("linear: negative row count M=" + std::to_string(M));
  if (M == 0) return;
  if (w.empty()) fail("linear: the PackedLinear is empty (never packed)");
  const int64_t K = w.in_features(), N = w.out_features();
  if (x == nullptr || y == nullptr) fail("linear: null x or y");
  if (x_stride < K) fail("linear: x_stride " + std::to_string(x_stride) + " < in_features " + std::to_string(K));
  if (y_stride < N) fail("linear: y_stride " + std::to_string(y_stride) + " < out_features " + std::to_string(N));

  if (dtype_is_quantized(w.weight_dtype())) {
    detail::linear_quantized(x, M, x_stride, w, y, y_stride, pool);
    return;
  }
  const KernelTable& kt = table_for(matmul_isa());
  Problem pb{x, M, x_stride, &w, y, y_stride, &kt, nullptr, 0};

  if (w.weight_dtype() == DType::kBF16 && kt.bf16_dot) {
    // vdpbf16ps reads x as bf16 pairs: round once per call, K padded to even.
    // Rows one cache line apart from a multiple of 4 KB (K = 2048 would put every
    // row a tile broadcasts from into the same L1 set, as with kXs).
    const int64_t kp = (K + 1) / 2 * 2;
    const int64_t stride = kp + 32;
    uint16_t* xb = static_cast<uint16_t*>(t_scratch.x_bf16.get(sizeof(uint16_t) * M * stride));
    pool.parallel_for(M, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) detail::round_to_bf16_avx512bf16(x + r * x_stride, K, kp, xb + r * stride);
    });
    pb.x_bf16 = xb;
    pb.x_bf16_stride = stride;
  }

  const int64_t panels = w.num_panels();
  const int threads = pool.num_threads();
  const bool stream = M <= stream_max_rows(w, pb.x_bf16 != nullptr);
  // Rows per pass over the weights when streaming (all of them, but for the dot path's large M).
  const int64_t pass_rows =
      pb.x_bf16 && g_stream_max_rows.load(std::memory_order_relaxed) < 0 ? kDotStreamRows : M;
  if (panels >= 2 * threads || M < 2 * kt.max_mr * threads) {
    // Split N: each thread reads only its panels; x is small next to them.
    const int64_t panel_bytes = static_cast<int64_t>(w.panel_stride_bytes());
    if (stream) {
      // Chunks of about 512 KB of weights (whole 4-panel groups when panels are
      // small): long contiguous runs for the prefetchers, at most ~30 µs of
      // streaming left to one thread at the end of a layer, and waking a worker
      // (a few µs) only for layers of at least two chunks.
      int64_t chunk = std::max<int64_t>(1, (int64_t{512} << 10) / panel_bytes);
      if (chunk >= 4) chunk = chunk / 4 * 4;
      for (int64_t m0 = 0; m0 < M; m0 += pass_rows) {
        const int64_t m1 = std::min(M, m0 + pass_rows);
        detail::share_chunks(pool, panels, chunk, [&](int64_t p0, int64_t p1) { stream_panels(pb, m0, m1, p0, p1); });
      }
    } else {
      if (!pb.x_bf16) {
        // x packed once into k blocks for every thread, rather than by each
        // thread for each of its chunks.
        const int64_t kblocks = (K + kKc - 1) / kKc;
        float* xpack = static_cast<float*>(t_scratch.x_pack.get(sizeof(float) * kblocks * M * kXs));
        pool.parallel_for(M, [&](int64_t r0, int64_t r1, int) {
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t b = 0; b < kblocks; ++b) {
              const int64_t kc = std::min<int64_t>(kKc, K - b * kKc);
              std::memcpy(xpack + (b * M + r) * kXs, x + r * x_stride + b * kKc, sizeof(float) * kc);
            }
          }
        });
        pb.xpack = xpack;
      }
      const int64_t chunk = std::max<int64_t>(1, panels / (kBlockedChunksPerThread * threads));
      std::vector<BlockScratch>& scratch = block_scratches(pb, threads);
      detail::share_chunks(pool, panels, chunk, [&](int64_t p0, int64_t p1, int t) {
        blocked(pb, scratch[static_cast<size_t>(t)], 0, M, p0, p1);
      });
    }
  } else {
    // Few panels, many rows: split rows (in whole tiles) instead.
    std::vector<BlockScratch>* scratch = stream ? nullptr : &block_scratches(pb, threads);
    pool.parallel_for(
        M,
        [&](int64_t m0, int64_t m1, int t) {
          if (stream) {
            stream_panels(pb, m0, m1, 0, panels);
          } else {
            blocked(pb, (*scratch)[static_cast<size_t>(t)], m0, m1, 0, panels);
          }
        },
        kt.max_mr);
  }
}

}  // namespace loom::cpu
