// Paged causal attention, compiled once per ISA (Highway foreach_target) and picked at run time.
//
// Work is cut into tiles: (sequence, kv head, a block of query tokens, a group of the q heads
// sharing that kv head). A tile walks its kv positions page by page in chunks, keeping a running
// max / sum / accumulator per query row (online softmax), so K and V of a kv head are read once
// per tile whatever the GQA ratio. Scores put positions in lanes (K pages are stored transposed,
// see KvPages), p·V puts head dims in lanes: both are broadcast multiply-adds with no horizontal
// reductions, for a decode row as for a prefill block.
// Tiles are handed out longest-first through an atomic counter, so a causal prefill (whose last
// blocks cost most) and a batch of decodes of different lengths both keep every thread busy.
//
// K and V have a type each (graph/kv_format.h). Element types (f32, bf16, f16) are read in
// place, widened on load. Block types (q8_0, q4_0) are read by position: a q8_0 or q4_0 K
// scores with integer dot products against the query rows quantized to int8 once per tile
// (the qdot kernels of linear(), runtime-dispatched: AVX512-VNNI, AVX-VNNI, AVX2, scalar), and a
// block V is dequantized chunk by chunk into f32 rows that the p·V loop reads like an f32 page.
// A rotated cache (rotate_k / rotate_v) has the query rows rotated on entry and the output rows
// on exit (kv_rotate).
#include <algorithm>
#include <tuple>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "loom/core/quantize.h"
#include "loom/runtime/cpu/attention.h"
#include "runtime/cpu/per_thread_scratch.h"
#include "runtime/cpu/qdot_kernels.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/cpu/attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

#ifndef LOOM_RUNTIME_CPU_ATTENTION_TILES_
#define LOOM_RUNTIME_CPU_ATTENTION_TILES_
namespace loom::cpu::attention_detail {

struct Tile {
  int64_t seq;
  int64_t kv_head;
  int64_t t0, t1;            // query tokens [t0, t1) of the sequence
  int64_t g0, g1;            // q heads kv_head * group + [g0, g1)
  int64_t span_lo, span_hi;  // kv positions some row of the tile attends to
  int64_t cost;              // rows × span, for longest-first scheduling
};

inline int64_t window_lo(int64_t pos, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
}

// Cuts every sequence into tiles of at most rows_cap query rows (tokens × heads of one group).
inline void plan_tiles(const AttentionSequence* seqs, int64_t num_seqs, const AttentionParams& p, int64_t rows_cap,
                       std::vector<Tile>* tiles) {
  tiles->clear();
  const int64_t group = p.num_q_heads / p.num_kv_heads;
  const int64_t heads_per_tile = std::min(group, rows_cap);
  const int64_t tokens_per_tile = std::max<int64_t>(1, rows_cap / heads_per_tile);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const AttentionSequence& seq = seqs[s];
    for (int64_t t0 = 0; t0 < seq.q_len; t0 += tokens_per_tile) {
      const int64_t t1 = std::min(seq.q_len, t0 + tokens_per_tile);
      int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
      for (int64_t t = t0; t < t1; ++t) {
        lo = std::min(lo, window_lo(seq.positions[t], p.sliding_window));
        hi = std::max<int64_t>(hi, seq.positions[t]);
      }
      for (int64_t kvh = 0; kvh < p.num_kv_heads; ++kvh)
        for (int64_t g0 = 0; g0 < group; g0 += heads_per_tile) {
          const int64_t g1 = std::min(group, g0 + heads_per_tile);
          tiles->push_back({s, kvh, t0, t1, g0, g1, lo, hi, (t1 - t0) * (g1 - g0) * (hi - lo + 1)});
        }
    }
  }
}

// Everything a tile body needs besides the tile.
struct Job {
  const float* q;
  int64_t q_stride;
  const AttentionSequence* seqs;
  AttentionParams p;
  float* out;
  int64_t out_stride;
  const float* zero_row;  // head_dim zeros, for rows of pages not held
  // The integer dot products of a block-type K (Q8_0, Q4_0) against int8 query rows.
  detail::QdotFn qdot_q8_0 = nullptr, qdot_q4_0 = nullptr;
};

// Up to one vector of consecutive positions of a chunk that lie in one page: their K^T rows
// start at kt (head dim k at kt + k * stride), their scores at column i of the score rows.
struct Segment {
  // Element-type K: the K^T rows (head dim k at kt + k * stride elements). Block-type K: the
  // first position's row (position j at kt + j * stride bytes). Null: page not held (before a
  // sliding window), masked.
  const void* kt;
  int64_t stride;
  int64_t i, n;
};

// Grows-only buffers of one thread index (per_thread_scratch), reserved by the
// caller for the largest tile, so steady-state decode steps do not allocate.
struct Scratch {
  std::vector<float> a, b, c, m, l;
  std::vector<int32_t> lo, hi;
  std::vector<const void*> vp;
  std::vector<Segment> seg, next_seg;
  // Block types: the query rows as int8 blocks, a padded query row, V rows dequantized, and
  // the V page rows they came from.
  std::vector<ActBlockQ8x32> qa;
  std::vector<float> qpad, vbuf;
  std::vector<const void*> vsrc;

  // Room for tiles of up to `rows` query rows of head_dim `d`, chunks of `chunk` positions.
  void reserve(int64_t rows, int64_t d, int64_t chunk) {
    const auto n = [](int64_t v) { return static_cast<size_t>(v); };
    a.reserve(n(rows * d));
    b.reserve(n(rows * d));
    c.reserve(n(rows * chunk));
    m.reserve(n(rows));
    l.reserve(n(rows));
    lo.reserve(n(rows));
    hi.reserve(n(rows));
    vp.reserve(n(chunk));
    seg.reserve(n(chunk));
    next_seg.reserve(n(chunk));
  }
  // Room for the block-type buffers as well (tiles over a block-type K or V).
  void reserve_blocks(int64_t rows, int64_t d, int64_t chunk) {
    const auto n = [](int64_t v) { return static_cast<size_t>(v); };
    const int64_t dp = (d + 31) / 32 * 32;
    qa.reserve(n(rows * dp / 32));
    qpad.reserve(n(dp));
    vbuf.reserve(n(chunk * dp));
    vsrc.reserve(n(chunk));
  }
};

inline const void* element_at(const void* page, int64_t i, DType dtype) {
  return static_cast<const char*>(page) + i * static_cast<int64_t>(dtype_size(dtype));
}

// Cuts chunk positions [c0, c0 + cn) of kv head kvh into segments of at most `lanes` (of any
// length within a page for a block-type K).
inline int64_t plan_segments(const KvPages& kv, int64_t kvh, int64_t head_dim, int64_t c0, int64_t cn, int64_t lanes,
                             Segment* out) {
  const bool block = graph::kv_dtype_is_block(kv.format.k);
  const int64_t row_bytes = static_cast<int64_t>(graph::kv_row_bytes(kv.format.k, head_dim));
  int64_t count = 0;
  for (int64_t i = 0; i < cn;) {
    const int64_t pos = c0 + i, page = pos / kv.page_size, off = pos % kv.page_size;
    const int64_t n = std::min({block ? cn : lanes, kv.page_size - off, cn - i});
    const bool present = page < kv.num_pages && kv.k_pages[page] && kv.v_pages[page];
    if (block) {
      out[count++] = {present ? kv_block_row(kv.k_pages[page], off, kvh, kv.page_size, head_dim, kv.format.k) : nullptr,
                      row_bytes, i, n};
    } else {
      out[count++] = {
          present ? element_at(kv.k_pages[page], k_page_index(off, kvh, 0, kv.page_size, head_dim), kv.format.k) : nullptr,
          kv.page_size, i, n};
    }
    i += n;
  }
  return count;
}

// Fills V row pointers for kv positions [c0, c0 + n) of kv head kvh. Rows of a
// null page (before a sliding window) point at `zero_row`: chunks start at
// absolute multiples of the chunk size, so their first rows may lie before every
// query's window; they are masked, but must point at readable memory.
inline void v_rows(const KvPages& kv, int64_t head_dim, int64_t kvh, int64_t c0, int64_t n, const void* zero_row,
                   const void** vp) {
  const DType t = kv.format.v;
  const bool block = graph::kv_dtype_is_block(t);
  int64_t page = c0 / kv.page_size, off = c0 % kv.page_size;
  for (int64_t i = 0; i < n; ++i) {
    const bool present = page < kv.num_pages && kv.k_pages[page] && kv.v_pages[page];
    vp[i] = !present ? zero_row
            : block  ? kv_block_row(kv.v_pages[page], off, kvh, kv.page_size, head_dim, t)
                     : element_at(kv.v_pages[page], v_page_index(off, kvh, 0, kv.page_size, head_dim), t);
    if (++off == kv.page_size) {
      off = 0;
      ++page;
    }
  }
}

// A block-type V row (ceil(head_dim / 32) blocks) as f32 into dst (as many values).
inline void dequantize_v_row(DType t, const void* src, float* dst, int64_t blocks) {
  if (t == DType::kQ8_0) {
    const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t k = 0; k < blocks; ++k) {
      const float d = f16_to_f32(b[k].d);
      for (int j = 0; j < 32; ++j) dst[32 * k + j] = d * static_cast<float>(b[k].qs[j]);
    }
  } else {
    const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
    for (int64_t k = 0; k < blocks; ++k) {
      const float d = f16_to_f32(b[k].d);
      for (int j = 0; j < 16; ++j) {
        dst[32 * k + j] = d * static_cast<float>((b[k].qs[j] & 0x0F) - 8);
        dst[32 * k + j + 16] = d * static_cast<float>((b[k].qs[j] >> 4) - 8);
      }
    }
  }
}

constexpr int64_t kChunk = 64;  // kv positions per online-softmax step
// Below this many multiply-adds a call runs on the calling thread: waking a worker costs more.
constexpr int64_t kMinParallelFlops = 1 << 16;

}  // namespace loom::cpu::attention_detail
#endif  // LOOM_RUNTIME_CPU_ATTENTION_TILES_

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using attention_detail::Job;
using attention_detail::Scratch;
using attention_detail::Segment;
using attention_detail::Tile;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;

// --- tile body -------------------------------------------------------------------------------
// Buffers: a = q rows [R][D] (pre-scaled), b = acc rows [R][D], c = scores/probabilities [R][C].
//
// Every query row goes through the same arithmetic whatever tile, chunk of a prefill or batch
// it lands in, so a request's output does not depend on its batch mates or on chunking:
//  - a score is one chain of multiply-adds over head dims 0..D-1 in order (positions in lanes,
//    read from the transposed K pages);
//  - chunks of C positions start at absolute multiples of C (the online-softmax steps);
//  - p·V is one chain of multiply-adds per head dim over the chunk's positions in order.

// The first n lanes at p (zeros above), and their store, never touching memory past p + n: a
// segment at the end of a page may end at the end of its allocation. AVX2 and AVX-512 masked
// loads and stores do not fault on masked-off lanes; older targets go through a buffer.
HWY_INLINE VF LoadLanes(DF d, hn::Mask<DF> m, const float* p, int64_t n) {
#if HWY_TARGET <= HWY_AVX2
  (void)n;
  return hn::MaskedLoad(m, d, p);
#else
  if (n == static_cast<int64_t>(hn::Lanes(d))) return hn::LoadU(d, p);
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)] = {};
  std::copy_n(p, n, buf);
  return hn::IfThenElseZero(m, hn::Load(d, buf));
#endif
}

HWY_INLINE void StoreLanes(DF d, hn::Mask<DF> m, VF v, float* p, int64_t n) {
#if HWY_TARGET <= HWY_AVX2
  (void)n;
  hn::BlendedStore(v, m, d, p);
#else
  (void)m;
  if (n == static_cast<int64_t>(hn::Lanes(d))) return hn::StoreU(v, d, p);
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, buf);
  std::copy_n(buf, n, p);
#endif
}

// K/V elements as f32 lanes: f32 pages load as they are, bf16 pages widen (exactly) on load.
using DBF = hn::Rebind<hwy::bfloat16_t, DF>;
HWY_INLINE VF LoadKv(DF d, const float* p) { return hn::LoadU(d, p); }
HWY_INLINE VF LoadKv(DF d, const hwy::bfloat16_t* p) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // One permute that puts bf16 i in the high half of 32-bit lane i and zeroes the low
  // halves, instead of Highway's zero-extend + shift (two uops on the FMA ports).
  (void)d;
  const __m512i idx = _mm512_set_epi16(15, 0, 14, 0, 13, 0, 12, 0, 11, 0, 10, 0, 9, 0, 8, 0, 7, 0, 6, 0, 5, 0, 4, 0,
                                       3, 0, 2, 0, 1, 0, 0, 0);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return VF{_mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, idx, _mm512_castsi256_si512(h)))};
#else
  return hn::PromoteTo(d, hn::LoadU(DBF(), p));
#endif
}
// f16 pages widen exactly too (F16C where the target has it).
using DF16 = hn::Rebind<hwy::float16_t, DF>;
HWY_INLINE VF LoadKv(DF d, const hwy::float16_t* p) { return hn::PromoteTo(d, hn::LoadU(DF16(), p)); }
HWY_INLINE VF LoadKvLanes(DF d, hn::Mask<DF>, const hwy::float16_t* p, int64_t n) {
  HWY_ALIGN hwy::float16_t buf[HWY_MAX_BYTES / sizeof(float)];
  std::memset(buf, 0, sizeof(buf));
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(hwy::float16_t));
  return hn::PromoteTo(d, hn::Load(DF16(), buf));
}
HWY_INLINE VF LoadKvLanes(DF d, hn::Mask<DF> m, const float* p, int64_t n) { return LoadLanes(d, m, p, n); }
HWY_INLINE VF LoadKvLanes(DF d, hn::Mask<DF>, const hwy::bfloat16_t* p, int64_t n) {
  HWY_ALIGN hwy::bfloat16_t buf[HWY_MAX_BYTES / sizeof(float)];
  std::memset(buf, 0, sizeof(buf));
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(hwy::bfloat16_t));
  return hn::PromoteTo(d, hn::Load(DBF(), buf));
}

// What a chunk's loops pull toward L1 while they run, one run of K/V ahead of the loads (see
// TileBody): the scores loop over head dims prefetches this chunk's V rows, the p·V loop over
// positions the K^T rows of the chunk that comes next.
struct Lookahead {
  const void* const* v_rows = nullptr;  // this chunk's V rows (null: none)
  int64_t v_count = 0, v_row_bytes = 0;
  const Segment* k_seg = nullptr;       // the next K^T run's segments (null: none)
  int64_t k_num_seg = 0, k_rows = 0, k_elem = 0;
};

// Into L2 (prefetcht1), not L1: a run is 64-256 lines issued within a few hundred cycles,
// more misses than L1 can track at once, while L2 takes them all and the loads that follow
// still hit it. On a Zen 4, kernels_bench AttentionDecodeFromMemory went from 110-147 to
// 52-95 µs for one sequence at context 576 (f32) and from 1.07-1.14 to 0.72-0.76 ms for 32 at
// context 136, with prefetcht0.
HWY_INLINE void PrefetchToL2(const void* p) { __builtin_prefetch(p, 0, 2); }

// Prefetches the lines of V rows [i0, i1) and of K^T rows [k0, k1) named by `la`.
HWY_INLINE void PrefetchV(const Lookahead& la, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1 && i < la.v_count; ++i)
    for (int64_t b = 0; b < la.v_row_bytes; b += 64) PrefetchToL2(static_cast<const char*>(la.v_rows[i]) + b);
}
HWY_INLINE void PrefetchKt(const Lookahead& la, int64_t k0, int64_t k1) {
  for (int64_t k = k0; k < k1 && k < la.k_rows; ++k)
    for (int64_t g = 0; g < la.k_num_seg; ++g)
      if (la.k_seg[g].kt)
        PrefetchToL2(static_cast<const char*>(la.k_seg[g].kt) + k * la.k_seg[g].stride * la.k_elem);
}

// Scores of NR rows against NS segments: sc[r][seg.i + j] = sum_k q_r[k] * K^T[k][j]. All
// segments of a chunk share one row stride (the page size). kFull: every segment is a whole
// vector, so loads and stores need no mask (and a later full-vector load of the scores is
// forwarded from the store instead of waiting for it to reach L1).
template <typename T, int NR, int NS, bool kFull>
HWY_INLINE void ScoreBlock(const float* const* qr, const Segment* seg, int64_t D, float* const* sc,
                           const Lookahead* la) {
  const DF d;
  VF acc[NR][NS];
  hn::Mask<DF> mask[NS];
  const T* kt[NS];
  const float* q[NR];
  const int64_t stride = seg[0].stride;
  for (int g = 0; g < NS; ++g) {
    kt[g] = static_cast<const T*>(seg[g].kt);
    mask[g] = hn::FirstN(d, static_cast<size_t>(seg[g].n));
  }
  for (int r = 0; r < NR; ++r) q[r] = qr[r];
  for (int r = 0; r < NR; ++r)
    for (int g = 0; g < NS; ++g) acc[r][g] = hn::Zero(d);
  // V rows to prefetch per head dim, so the loop covers the chunk's V once.
  const int64_t v_per_k = la && la->v_rows ? (la->v_count + D - 1) / D : 0;
  for (int64_t k = 0, off = 0; k < D; ++k, off += stride) {
    if (v_per_k) PrefetchV(*la, k * v_per_k, (k + 1) * v_per_k);
    VF kv[NS];
    for (int g = 0; g < NS; ++g)
      kv[g] = kFull ? LoadKv(d, kt[g] + off) : LoadKvLanes(d, mask[g], kt[g] + off, seg[g].n);
    for (int r = 0; r < NR; ++r) {
      const VF qv = hn::Set(d, q[r][k]);
      for (int g = 0; g < NS; ++g) acc[r][g] = hn::MulAdd(qv, kv[g], acc[r][g]);
    }
  }
  for (int r = 0; r < NR; ++r)
    for (int g = 0; g < NS; ++g) {
      if (kFull) {
        hn::StoreU(acc[r][g], d, sc[r] + seg[g].i);
      } else {
        StoreLanes(d, mask[g], acc[r][g], sc[r] + seg[g].i, seg[g].n);
      }
    }
}

template <typename T, int NR, int NS>
HWY_INLINE void ScoreSegments(const float* const* qr, const Segment* seg, int64_t D, float* const* sc,
                              const Lookahead* la) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  bool full = true;
  for (int g = 0; g < NS; ++g) full = full && seg[g].n == N;
  if (full) {
    ScoreBlock<T, NR, NS, true>(qr, seg, D, sc, la);
  } else {
    ScoreBlock<T, NR, NS, false>(qr, seg, D, sc, la);
  }
}

// la: prefetched during the first block of segments only.
template <typename T, int NR>
HWY_INLINE void ScoreRows(const float* const* qr, const Segment* seg, int64_t num_seg, int64_t D, float* const* sc,
                          const Lookahead* la) {
  int64_t g = 0;
  for (; g + 4 <= num_seg; g += 4, la = nullptr) ScoreSegments<T, NR, 4>(qr, seg + g, D, sc, la);
  switch (num_seg - g) {
    case 3: ScoreSegments<T, NR, 3>(qr, seg + g, D, sc, la); break;
    case 2: ScoreSegments<T, NR, 2>(qr, seg + g, D, sc, la); break;
    case 1: ScoreSegments<T, NR, 1>(qr, seg + g, D, sc, la); break;
    default: break;
  }
}

// acc rows += p[row][i] * V_i over the chunk, for NR rows, KB vectors of head_dim at a time
// kept in registers.
template <typename T, int NR, int KB>
HWY_INLINE void AxpyBlock(float* const* acc, const float* const* pr, const T* const* vp, int64_t cn, int64_t k0,
                          const Lookahead* la) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF a[NR][KB];
  for (int j = 0; j < NR; ++j)
    for (int b = 0; b < KB; ++b) a[j][b] = hn::LoadU(d, acc[j] + k0 + b * N);
  // K^T rows of the next chunk to prefetch per position, so the loop covers them once.
  const int64_t k_per_i = la && la->k_seg ? (la->k_rows + cn - 1) / cn : 0;
  for (int64_t i = 0; i < cn; ++i) {
    if (k_per_i) PrefetchKt(*la, i * k_per_i, (i + 1) * k_per_i);
    VF v[KB];
    for (int b = 0; b < KB; ++b) v[b] = LoadKv(d, vp[i] + k0 + b * N);
    for (int j = 0; j < NR; ++j) {
      const VF pj = hn::Set(d, pr[j][i]);
      for (int b = 0; b < KB; ++b) a[j][b] = hn::MulAdd(pj, v[b], a[j][b]);
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int b = 0; b < KB; ++b) hn::StoreU(a[j][b], d, acc[j] + k0 + b * N);
}

HWY_INLINE float ToF32(float v) { return v; }
HWY_INLINE float ToF32(hwy::bfloat16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bf16_to_f32(bits);
}
HWY_INLINE float ToF32(hwy::float16_t v) {
  uint16_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return f16_to_f32(bits);
}

template <typename T, int NR>
HWY_INLINE void AxpyRows(float* const* acc, const float* const* pr, const T* const* vp, int64_t cn, int64_t D,
                         int64_t D_vec, const Lookahead* la) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  // Accumulators for NR rows × KB vectors: 16 of AVX-512's 32 registers, 8 of AVX2's 16.
  constexpr int KB = (HWY_TARGET <= HWY_AVX3 ? 16 : 8) / NR > 0 ? (HWY_TARGET <= HWY_AVX3 ? 16 : 8) / NR : 1;
  int64_t k = 0;
  for (; k + KB * N <= D_vec; k += KB * N, la = nullptr) AxpyBlock<T, NR, KB>(acc, pr, vp, cn, k, la);
  for (; k < D_vec; k += N, la = nullptr) AxpyBlock<T, NR, 1>(acc, pr, vp, cn, k, la);
  for (k = D_vec; k < D; ++k)
    for (int j = 0; j < NR; ++j) {
      float sum = acc[j][k];
      for (int64_t i = 0; i < cn; ++i) sum = std::fma(pr[j][i], ToF32(vp[i][k]), sum);
      acc[j][k] = sum;
    }
}

// The typed halves of a tile body, picked per K and V type at run time (an indirect call per
// four rows and chunk): scores over an element-type K, p·V over an element-type V (a block
// type's V rows are dequantized to f32 first).
using ScoreFn = void (*)(const float* const*, const Segment*, int64_t, int64_t, float* const*, const Lookahead*);
using AxpyFn = void (*)(float* const*, const float* const*, const void* const*, int64_t, int64_t, int64_t,
                        const Lookahead*);
template <typename T, int NR>
void ScoreRowsOf(const float* const* qr, const Segment* seg, int64_t num_seg, int64_t D, float* const* sc,
                 const Lookahead* la) {
  ScoreRows<T, NR>(qr, seg, num_seg, D, sc, la);
}
template <typename T, int NR>
void AxpyRowsOf(float* const* acc, const float* const* pr, const void* const* vp, int64_t cn, int64_t D,
                int64_t D_vec, const Lookahead* la) {
  AxpyRows<T, NR>(acc, pr, reinterpret_cast<const T* const*>(vp), cn, D, D_vec, la);
}
struct TypedOps {
  ScoreFn score[4];  // [rows - 1]
  AxpyFn axpy[4];
};
template <typename T>
constexpr TypedOps kOps = {{ScoreRowsOf<T, 1>, ScoreRowsOf<T, 2>, ScoreRowsOf<T, 3>, ScoreRowsOf<T, 4>},
                           {AxpyRowsOf<T, 1>, AxpyRowsOf<T, 2>, AxpyRowsOf<T, 3>, AxpyRowsOf<T, 4>}};
inline const TypedOps& OpsFor(DType t) {
  switch (t) {
    case DType::kBF16: return kOps<hwy::bfloat16_t>;
    case DType::kF16: return kOps<hwy::float16_t>;
    default: return kOps<float>;  // F32, and block types once dequantized (V)
  }
}

// Scores of rows [r, r + nr) against a block-type K: one qdot call per segment (its positions
// are consecutive rows of one page), int8 query blocks × the K blocks, into the score rows.
inline void ScoreBlockRows(const Job& job, DType k_type, const ActBlockQ8x32* qa, int64_t blocks, int nr, const Segment* seg,
                           int64_t num_seg, float* sc, int64_t ldc) {
  detail::QdotArgs a;
  a.blocks = blocks;
  a.act = reinterpret_cast<const uint8_t*>(qa);
  a.act_row_bytes = static_cast<size_t>(blocks) * sizeof(ActBlockQ8x32);
  a.m = nr;
  a.ldy = ldc;
  for (int64_t g = 0; g < num_seg; ++g) {
    a.w = static_cast<const uint8_t*>(seg[g].kt);
    a.w_row_bytes = static_cast<size_t>(seg[g].stride);
    a.outputs = seg[g].n;
    a.y = sc + seg[g].i;
    (k_type == DType::kQ8_0 ? job.qdot_q8_0 : job.qdot_q4_0)(a);
  }
}

// A block-type V row (`blocks` blocks of 32) as f32 into dst, in vectors: q8_0 widens int8 to
// f32, q4_0 splits each byte's nibbles (element j low, j + 16 high) and takes 8 off; both times
// the block's scale. Exactly the values of dequantize_row_ref (one rounding: d × q).
HWY_INLINE void DequantizeVRow(DType t, const void* src, float* dst, int64_t blocks) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  if (N > 16 || 32 % N != 0) return attention_detail::dequantize_v_row(t, src, dst, blocks);
  const hn::Rebind<int8_t, DF> d8;
  const hn::Rebind<uint8_t, DF> du8;
  if (t == DType::kQ8_0) {
    const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
    for (int64_t k = 0; k < blocks; ++k) {
      const VF scale = hn::Set(d, f16_to_f32(b[k].d));
      for (int64_t j = 0; j < 32; j += N)
        hn::StoreU(hn::Mul(scale, hn::ConvertTo(d, hn::PromoteTo(DI(), hn::LoadU(d8, b[k].qs + j)))), d,
                   dst + 32 * k + j);
    }
    return;
  }
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  const auto low = hn::Set(du8, uint8_t{0x0F});
  const auto eight = hn::Set(DI(), 8);
  for (int64_t k = 0; k < blocks; ++k) {
    const VF scale = hn::Set(d, f16_to_f32(b[k].d));
    for (int64_t j = 0; j < 16; j += N) {
      const auto q = hn::LoadU(du8, b[k].qs + j);
      const auto lo = hn::Sub(hn::PromoteTo(DI(), hn::And(q, low)), eight);
      const auto hi = hn::Sub(hn::PromoteTo(DI(), hn::ShiftRight<4>(q)), eight);
      hn::StoreU(hn::Mul(scale, hn::ConvertTo(d, lo)), d, dst + 32 * k + j);
      hn::StoreU(hn::Mul(scale, hn::ConvertTo(d, hi)), d, dst + 32 * k + j + 16);
    }
  }
}

// Tiles of any K and V types (see TypedOps).
void TileBody(const Job& job, const Tile& tile, const Tile* next_tile, Scratch& s) {
  const DF d;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const AttentionParams& p = job.p;
  const int64_t D = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  const int64_t D_vec = D / N * N;
  const AttentionSequence& seq = job.seqs[tile.seq];
  const KvPages& kv = seq.kv;
  const graph::KvFormat& fmt = kv.format;
  const bool k_block = graph::kv_dtype_is_block(fmt.k), v_block = graph::kv_dtype_is_block(fmt.v);
  const int64_t blocks = (D + 31) / 32, Dp = blocks * 32;  // block types: head dims padded to whole blocks
  const TypedOps& k_ops = OpsFor(fmt.k);
  const TypedOps& v_ops = OpsFor(fmt.v);
  const int64_t ng = tile.g1 - tile.g0;
  const int64_t R = (tile.t1 - tile.t0) * ng;
  // Score rows are read in whole vectors: the chunk must be a multiple of the lane count.
  const int64_t C = std::max<int64_t>(attention_detail::kChunk, N);

  s.a.resize(static_cast<size_t>(R * D));
  s.b.assign(static_cast<size_t>(R * D), 0.0f);
  s.c.resize(static_cast<size_t>(R * C));
  s.m.assign(static_cast<size_t>(R), -std::numeric_limits<float>::infinity());
  s.l.assign(static_cast<size_t>(R), 0.0f);
  s.lo.resize(static_cast<size_t>(R));
  s.hi.resize(static_cast<size_t>(R));
  s.seg.resize(static_cast<size_t>(C));
  s.next_seg.resize(static_cast<size_t>(C));
  s.vp.resize(static_cast<size_t>(C));
  const void* const* vp = s.vp.data();
  Segment* seg = s.seg.data();
  if (k_block) {
    s.qa.resize(static_cast<size_t>(R * blocks));
    s.qpad.assign(static_cast<size_t>(Dp), 0.0f);
  }
  if (v_block) {
    s.vbuf.resize(static_cast<size_t>(C * Dp));
    s.vsrc.resize(static_cast<size_t>(C));
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tile.t0 + r / ng, h = tile.kv_head * group + tile.g0 + r % ng;
    const float* qr = job.q + (seq.q_begin + t) * job.q_stride + h * D;
    float* ar = s.a.data() + r * D;
    for (int64_t k = 0; k < D; ++k) ar[k] = qr[k] * p.scale;
    if (fmt.rotate_k) kv_rotate(ar, D);  // H q · H k = q · k
    if (k_block) {
      std::copy_n(ar, D, s.qpad.data());
      quantize_activations_q8x32(s.qpad.data(), s.qa.data() + r * blocks, Dp);
    }
    const int64_t pos = seq.positions[t];
    s.lo[static_cast<size_t>(r)] = static_cast<int32_t>(attention_detail::window_lo(pos, p.sliding_window));
    s.hi[static_cast<size_t>(r)] = static_cast<int32_t>(pos);
  }

  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const bool softcap = p.softcap > 0.0f;
  const VF cap = hn::Set(d, p.softcap);
  const VF inv_cap = hn::Set(d, softcap ? 1.0f / p.softcap : 0.0f);
  const float* q_rows[4];
  float* sc_rows[4];
  float* acc_rows[4];
  const float* p_rows[4];

  // Software prefetch, one run ahead: K/V of a decode tile come from memory in runs of a page
  // (16 KB per kv head at page 64, f32), too short for the hardware prefetchers to reach speed,
  // and the loads then wait on each line in turn. So while the scores read this chunk's K^T
  // they prefetch its V rows, and while p·V reads V it prefetches the K^T rows of the next chunk,
  // or of this thread's next tile after the last chunk: each run is on its way while the one
  // before it is used. kernels_bench AttentionDecodeFromMemory, 2 threads, 32 sequences at
  // context 448: 1.9-2.0 → 1.4-1.6 ms in f32, 1.3-1.5 → 0.7 ms in bf16 (prefetching
  // into L1 then; into L2 since, see PrefetchToL2); K/V already in L2 (a case the model does not
  // meet: every layer reads other pages) costs 18% more.
  // Only tiles of one group of rows (decode: one token, its q heads) prefetch: prefill tiles
  // re-read each chunk from cache for every group of rows, enough work to cover the misses, and
  // ran 6-9% slower with it (kernels_bench AttentionPrefill).
  const bool lookahead = R <= 4;
  int64_t max_lo = 0, min_hi = std::numeric_limits<int64_t>::max();
  for (int64_t r = 0; r < R; ++r) {
    max_lo = std::max<int64_t>(max_lo, s.lo[static_cast<size_t>(r)]);
    min_hi = std::min<int64_t>(min_hi, s.hi[static_cast<size_t>(r)]);
  }
  for (int64_t c0 = tile.span_lo - tile.span_lo % C; c0 <= tile.span_hi; c0 += C) {
    const int64_t cn = std::min(C, tile.span_hi - c0 + 1);
    const int64_t num_seg = attention_detail::plan_segments(kv, tile.kv_head, D, c0, cn, N, seg);
    const void** v_src = v_block ? s.vsrc.data() : s.vp.data();
    attention_detail::v_rows(kv, D, tile.kv_head, c0, cn, job.zero_row, v_src);
    Lookahead la_v, la_k;
    if (lookahead) {
      la_v = {v_src, cn, static_cast<int64_t>(graph::kv_row_bytes(fmt.v, D))};
      // The K^T run read after this chunk's V: the next chunk's, or after the last chunk the
      // first chunk of this thread's next tile.
      const bool last = c0 + C > tile.span_hi;
      if (const Tile* t = last ? next_tile : &tile) {
        const KvPages& tkv = job.seqs[t->seq].kv;
        const int64_t n0 = last ? t->span_lo - t->span_lo % C : c0 + C;
        la_k.k_seg = s.next_seg.data();
        la_k.k_num_seg = attention_detail::plan_segments(tkv, t->kv_head, D, n0, std::min(C, t->span_hi - n0 + 1), N,
                                                         s.next_seg.data());
        if (graph::kv_dtype_is_block(tkv.format.k)) {
          la_k.k_rows = C;  // the start of every row (segments' stride is the row's bytes)
          la_k.k_elem = 1;
        } else {
          la_k.k_rows = D;
          la_k.k_elem = static_cast<int64_t>(dtype_size(tkv.format.k));
        }
      }
    }

    // Segments of a page no longer held score 0 here and are masked below.
    int64_t live = 0;
    for (int64_t g = 0; g < num_seg; ++g) {
      if (seg[g].kt) {
        seg[live++] = seg[g];
      } else {
        for (int64_t r = 0; r < R; ++r)
          std::fill_n(s.c.data() + r * C + seg[g].i, seg[g].n, 0.0f);
      }
    }
    if (k_block && lookahead) PrefetchV(la_v, 0, cn);
    for (int64_t r = 0; r < R; r += 4) {
      const int64_t nr = std::min<int64_t>(4, R - r);
      if (k_block) {
        ScoreBlockRows(job, fmt.k, s.qa.data() + r * blocks, blocks, static_cast<int>(nr), seg, live, s.c.data() + r * C, C);
        continue;
      }
      for (int64_t j = 0; j < nr; ++j) {
        q_rows[j] = s.a.data() + (r + j) * D;
        sc_rows[j] = s.c.data() + (r + j) * C;
      }
      k_ops.score[nr - 1](q_rows, seg, live, D, sc_rows, r == 0 ? &la_v : nullptr);
    }
    // A block-type V: this chunk's rows as f32 (rows of pages not held stay the zero row).
    if (v_block) {
      for (int64_t i = 0; i < cn; ++i) {
        if (v_src[i] == job.zero_row) {
          s.vp[static_cast<size_t>(i)] = job.zero_row;
          continue;
        }
        float* dst = s.vbuf.data() + i * Dp;
        DequantizeVRow(fmt.v, v_src[i], dst, blocks);
        s.vp[static_cast<size_t>(i)] = dst;
      }
    }

    // A whole chunk inside every row's window (all but the diagonal and window-edge chunks)
    // needs no mask, and unless softcapped its scores stay as they are.
    const bool unmasked = cn == C && c0 >= max_lo && c0 + cn - 1 <= min_hi;
    for (int64_t r = 0; r < R; ++r) {
      float* row = s.c.data() + r * C;
      VF mx = neg_inf;
      if (unmasked && !softcap) {
        for (int64_t i = 0; i < cn; i += N) mx = hn::Max(mx, hn::LoadU(d, row + i));
      } else {
        const auto lo_v = hn::Set(di, s.lo[static_cast<size_t>(r)]);
        const auto hi_v = hn::Set(di, static_cast<int32_t>(std::min<int64_t>(s.hi[static_cast<size_t>(r)], c0 + cn - 1)));
        for (int64_t i = 0; i < cn; i += N) {
          VF sv = hn::LoadU(d, row + i);
          if (softcap) sv = hn::Mul(cap, hn::Tanh(d, hn::Mul(sv, inv_cap)));
          const auto pos = hn::Iota(di, static_cast<int32_t>(c0 + i));
          const auto invalid = hn::RebindMask(d, hn::Or(hn::Gt(lo_v, pos), hn::Gt(pos, hi_v)));
          sv = hn::IfThenElse(invalid, neg_inf, sv);
          hn::StoreU(sv, d, row + i);
          mx = hn::Max(mx, sv);
        }
      }
      const float m_old = s.m[static_cast<size_t>(r)];
      const float m_new = std::max(m_old, hn::GetLane(hn::MaxOfLanes(d, mx)));
      const float safe = m_new == -std::numeric_limits<float>::infinity() ? 0.0f : m_new;
      // exp(0) is exactly 1: a running max that did not move skips the call.
      const float alpha = m_old == safe ? 1.0f : std::exp(m_old - safe);
      const VF safe_v = hn::Set(d, safe);
      VF sum = hn::Zero(d);
      for (int64_t i = 0; i < cn; i += N) {
        const VF pv = hn::Exp(d, hn::Sub(hn::LoadU(d, row + i), safe_v));
        hn::StoreU(pv, d, row + i);
        sum = hn::Add(sum, pv);
      }
      s.m[static_cast<size_t>(r)] = m_new;
      s.l[static_cast<size_t>(r)] = s.l[static_cast<size_t>(r)] * alpha + hn::GetLane(hn::SumOfLanes(d, sum));
      if (alpha != 1.0f) {
        float* ar = s.b.data() + r * D;
        for (int64_t k = 0; k < D; ++k) ar[k] *= alpha;
      }
    }

    for (int64_t r = 0; r < R; r += 4) {
      const int64_t nr = std::min<int64_t>(4, R - r);
      for (int64_t j = 0; j < nr; ++j) {
        acc_rows[j] = s.b.data() + (r + j) * D;
        p_rows[j] = s.c.data() + (r + j) * C;
      }
      v_ops.axpy[nr - 1](acc_rows, p_rows, vp, cn, D, D_vec, r == 0 ? &la_k : nullptr);
    }
  }

  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tile.t0 + r / ng, h = tile.kv_head * group + tile.g0 + r % ng;
    float* o = job.out + (seq.q_begin + t) * job.out_stride + h * D;
    const float* ar = s.b.data() + r * D;
    float inv_l = 1.0f / s.l[static_cast<size_t>(r)];
    if (p.sinks) {
      // The sink joins the denominator on the running maximum's scale (or the sink's, if larger).
      const float m = s.m[static_cast<size_t>(r)], sink = p.sinks[h], top = std::max(m, sink);
      const float keep = std::exp(m - top);
      inv_l = keep / (s.l[static_cast<size_t>(r)] * keep + std::exp(sink - top));
    }
    for (int64_t k = 0; k < D; ++k) o[k] = ar[k] * inv_l;
    if (fmt.rotate_v) kv_rotate(o, D);  // Σ p H v = H Σ p v, and H H = I
  }
}


void PagedAttention(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                    const AttentionParams& p, float* out, int64_t out_stride, ThreadPool* pool) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const int threads = pool->num_threads();
  thread_local std::vector<Tile> tiles;
  // Two vectors of rows per tile; fewer when that leaves threads idle (one long sequence with
  // few kv heads), down to one vector.
  int64_t rows_cap = 2 * N;
  attention_detail::plan_tiles(seqs, num_seqs, p, rows_cap, &tiles);
  while (rows_cap > N && static_cast<int64_t>(tiles.size()) < 2 * threads) {
    rows_cap /= 2;
    attention_detail::plan_tiles(seqs, num_seqs, p, rows_cap, &tiles);
  }
  if (tiles.empty()) return;
  int64_t total = 0;
  for (const Tile& t : tiles) total += t.cost;
  // Longest first; ties in the order plan_tiles made them (as a stable sort, but
  // std::stable_sort allocates a buffer on every call).
  std::sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) {
    if (a.cost != b.cost) return a.cost > b.cost;
    return std::tie(a.seq, a.t0, a.kv_head, a.g0) < std::tie(b.seq, b.t0, b.kv_head, b.g0);
  });

  thread_local std::vector<float> zeros;
  if (static_cast<int64_t>(zeros.size()) < p.head_dim) zeros.assign(static_cast<size_t>(p.head_dim), 0.0f);
  Job job{q, q_stride, seqs, p, out, out_stride, zeros.data()};
  const Tile* tile_list = tiles.data();
  const int64_t num_tiles = static_cast<int64_t>(tiles.size());
  int64_t max_rows = 0;
  for (const Tile& t : tiles) max_rows = std::max(max_rows, (t.t1 - t.t0) * (t.g1 - t.g0));
  std::vector<Scratch>& scratches = detail::per_thread_scratch<Scratch>(threads);
  bool any_block = false;
  for (int64_t i = 0; i < num_seqs; ++i) {
    const graph::KvFormat& f = seqs[i].kv.format;
    any_block = any_block || graph::kv_dtype_is_block(f.k) || graph::kv_dtype_is_block(f.v);
  }
  if (any_block) {
    const detail::QdotTable& t = detail::active_qdot_table();
    job.qdot_q8_0 = t.q8_0;
    job.qdot_q4_0 = t.q4_0;
  }
  for (Scratch& s : scratches) {
    s.reserve(max_rows, p.head_dim, std::max<int64_t>(attention_detail::kChunk, N));
    if (any_block) s.reserve_blocks(max_rows, p.head_dim, std::max<int64_t>(attention_detail::kChunk, N));
  }
  std::atomic<int64_t> next{0};
  // Each thread claims its next tile before running the current one, so the current one's last
  // chunk can prefetch the next one's first.
  auto work = [&](int64_t, int64_t, int thread_index) {
    Scratch& scratch = scratches[static_cast<size_t>(thread_index)];
    int64_t i = next.fetch_add(1, std::memory_order_relaxed);
    while (i < num_tiles) {
      const int64_t j = next.fetch_add(1, std::memory_order_relaxed);
      const Tile* successor = j < num_tiles ? &tile_list[j] : nullptr;
      TileBody(job, tile_list[i], successor, scratch);
      i = j;
    }
  };
  if (threads == 1 || num_tiles == 1 || total * p.head_dim < attention_detail::kMinParallelFlops) {
    work(0, 1, 0);
  } else {
    pool->parallel_for(threads, work, 1);
  }
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace cpu
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::cpu {

HWY_EXPORT(PagedAttention);

void paged_attention(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                     const AttentionParams& p, float* out, int64_t out_stride, ThreadPool& pool) {
  throw_if_error(check_paged_attention_args(q, q_stride, seqs, num_seqs, p, out, out_stride));
  HWY_DYNAMIC_DISPATCH(PagedAttention)(q, q_stride, seqs, num_seqs, p, out, out_stride, &pool);
}

}  // namespace loom::cpu
#endif  // HWY_ONCE
