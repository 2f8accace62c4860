// Paged causal attention, compiled once per ISA (Highway foreach_target) and picked at run time.
//
// Work is cut into tiles: (sequence, kv head, a block of query tokens, a group of the q heads
// sharing that kv head). A tile walks its kv positions page by page in chunks, keeping a running
// max / sum / accumulator per query row (online softmax), so K and V of a kv head are read once
// per tile whatever the GQA ratio. Two tile bodies:
//  - rows in lanes: when a tile has at least one vector of query rows (prefill, chunked prefill,
//    large GQA groups). Scores of all rows for one kv position form one vector, so q·k and p·V are
//    broadcast-FMAs with no horizontal reductions, and the softmax bookkeeping is vectorized.
//  - head_dim in lanes: for decode-like tiles with fewer rows than lanes. q·k is a SIMD dot
//    product over head_dim, p·V an axpy over head_dim.
// Tiles are handed out longest-first through an atomic counter, so a causal prefill (whose last
// blocks cost most) and a batch of decodes of different lengths both keep every thread busy.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "loom/runtime/cpu/attention.h"

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
};

// Grows-only per-thread buffers, so steady-state decode steps do not allocate.
struct Scratch {
  std::vector<float> a, b, c, m, l;
  std::vector<int32_t> lo, hi;
  std::vector<const float*> kp, vp;
};

// Fills K/V row pointers for kv positions [c0, c0 + n) of kv head kvh.
// Rows of a null page (before a sliding window) read as zeros: chunks start at
// absolute multiples of the chunk size, so their first rows may lie before every
// query's window; they are masked, but must point at readable memory.
inline const float* zero_row(int64_t head_dim) {
  thread_local std::vector<float> zeros;
  if (static_cast<int64_t>(zeros.size()) < head_dim) zeros.assign(static_cast<size_t>(head_dim), 0.0f);
  return zeros.data();
}

inline void kv_rows(const KvPages& kv, int64_t num_kv_heads, int64_t head_dim, int64_t kvh, int64_t c0, int64_t n,
                    const float** kp, const float** vp) {
  int64_t page = c0 / kv.page_size, off = c0 % kv.page_size;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = (off * num_kv_heads + kvh) * head_dim;
    const bool present = page < kv.num_pages && kv.k_pages[page] && kv.v_pages[page];
    kp[i] = present ? kv.k_pages[page] + at : zero_row(head_dim);
    vp[i] = present ? kv.v_pages[page] + at : zero_row(head_dim);
    if (++off == kv.page_size) {
      off = 0;
      ++page;
    }
  }
}

constexpr int64_t kChunkRowsInLanes = 32;  // kv positions per online-softmax step
constexpr int64_t kChunkDimsInLanes = 64;
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
using attention_detail::Tile;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using VF = hn::Vec<DF>;

// --- rows in lanes -------------------------------------------------------------------------
// Buffers (Rp = NV lanes-vectors of rows): a = q^T [D][Rp] (pre-scaled), b = acc^T [D][Rp],
// c = scores/probabilities [chunk][Rp].
template <int NV>
void TileRowsInLanes(const Job& job, const Tile& tile, Scratch& s) {
  const DF d;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t Rp = NV * N;
  const AttentionParams& p = job.p;
  const int64_t D = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  const AttentionSequence& seq = job.seqs[tile.seq];
  const int64_t ng = tile.g1 - tile.g0;
  const int64_t R = (tile.t1 - tile.t0) * ng;
  constexpr int64_t C = attention_detail::kChunkRowsInLanes;

  s.a.resize(static_cast<size_t>(D * Rp));
  s.b.assign(static_cast<size_t>(D * Rp), 0.0f);
  s.c.resize(static_cast<size_t>(C * Rp));
  s.m.assign(static_cast<size_t>(Rp), -std::numeric_limits<float>::infinity());
  s.l.assign(static_cast<size_t>(Rp), 0.0f);
  s.lo.resize(static_cast<size_t>(Rp));
  s.hi.resize(static_cast<size_t>(Rp));
  s.kp.resize(C);
  s.vp.resize(C);
  float* qt = s.a.data();
  float* acc = s.b.data();
  float* sc = s.c.data();
  int32_t* lo = s.lo.data();
  int32_t* hi = s.hi.data();

  // Rows every chunk position is visible to; chunks inside [full_lo, full_hi] skip masking.
  int64_t full_lo = 0, full_hi = std::numeric_limits<int64_t>::max();
  for (int64_t r = 0; r < Rp; ++r) {
    if (r < R) {
      const int64_t t = tile.t0 + r / ng, h = tile.kv_head * group + tile.g0 + r % ng;
      const float* qr = job.q + (seq.q_begin + t) * job.q_stride + h * D;
      for (int64_t k = 0; k < D; ++k) qt[k * Rp + r] = qr[k] * p.scale;
      const int64_t pos = seq.positions[t];
      lo[r] = static_cast<int32_t>(attention_detail::window_lo(pos, p.sliding_window));
      hi[r] = static_cast<int32_t>(pos);
      full_lo = std::max<int64_t>(full_lo, lo[r]);
      full_hi = std::min<int64_t>(full_hi, pos);
    } else {  // padding lanes: never valid, never written out
      for (int64_t k = 0; k < D; ++k) qt[k * Rp + r] = 0.0f;
      lo[r] = std::numeric_limits<int32_t>::max();
      hi[r] = -1;
    }
  }

  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const VF one = hn::Set(d, 1.0f);
  const bool softcap = p.softcap > 0.0f;
  const VF cap = hn::Set(d, p.softcap);
  const VF inv_cap = hn::Set(d, softcap ? 1.0f / p.softcap : 0.0f);

  for (int64_t c0 = tile.span_lo; c0 <= tile.span_hi; c0 += C) {
    const int64_t cn = std::min(C, tile.span_hi - c0 + 1);
    attention_detail::kv_rows(seq.kv, p.num_kv_heads, D, tile.kv_head, c0, cn, s.kp.data(), s.vp.data());
    const float* const* kp = s.kp.data();
    const float* const* vp = s.vp.data();

    // Scores: sc[i][rows] = sum_k qt[k][rows] * K_i[k].
    int64_t i = 0;
    for (; i + 4 <= cn; i += 4) {
      VF a0[NV], a1[NV], a2[NV], a3[NV];
      for (int v = 0; v < NV; ++v) a0[v] = a1[v] = a2[v] = a3[v] = hn::Zero(d);
      const float *k0 = kp[i], *k1 = kp[i + 1], *k2 = kp[i + 2], *k3 = kp[i + 3];
      for (int64_t k = 0; k < D; ++k) {
        const float* qk = qt + k * Rp;
        const VF b0 = hn::Set(d, k0[k]), b1 = hn::Set(d, k1[k]), b2 = hn::Set(d, k2[k]), b3 = hn::Set(d, k3[k]);
        for (int v = 0; v < NV; ++v) {
          const VF qv = hn::LoadU(d, qk + v * N);
          a0[v] = hn::MulAdd(qv, b0, a0[v]);
          a1[v] = hn::MulAdd(qv, b1, a1[v]);
          a2[v] = hn::MulAdd(qv, b2, a2[v]);
          a3[v] = hn::MulAdd(qv, b3, a3[v]);
        }
      }
      for (int v = 0; v < NV; ++v) {
        hn::StoreU(a0[v], d, sc + (i + 0) * Rp + v * N);
        hn::StoreU(a1[v], d, sc + (i + 1) * Rp + v * N);
        hn::StoreU(a2[v], d, sc + (i + 2) * Rp + v * N);
        hn::StoreU(a3[v], d, sc + (i + 3) * Rp + v * N);
      }
    }
    for (; i < cn; ++i) {
      VF a[NV];
      for (int v = 0; v < NV; ++v) a[v] = hn::Zero(d);
      const float* kr = kp[i];
      for (int64_t k = 0; k < D; ++k) {
        const VF b = hn::Set(d, kr[k]);
        for (int v = 0; v < NV; ++v) a[v] = hn::MulAdd(hn::LoadU(d, qt + k * Rp + v * N), b, a[v]);
      }
      for (int v = 0; v < NV; ++v) hn::StoreU(a[v], d, sc + i * Rp + v * N);
    }

    // Softcap, mask, online softmax update, rescale of the accumulator.
    const bool need_mask = !(c0 >= full_lo && c0 + cn - 1 <= full_hi);
    bool rescale = false;
    VF alpha[NV];
    for (int v = 0; v < NV; ++v) {
      const auto lo_v = hn::LoadU(di, lo + v * N);
      const auto hi_v = hn::LoadU(di, hi + v * N);
      VF mx = neg_inf;
      for (int64_t j = 0; j < cn; ++j) {
        float* sp = sc + j * Rp + v * N;
        VF sv = hn::LoadU(d, sp);
        if (softcap) sv = hn::Mul(cap, hn::Tanh(d, hn::Mul(sv, inv_cap)));
        if (need_mask) {
          const auto pos = hn::Set(di, static_cast<int32_t>(c0 + j));
          const auto invalid = hn::RebindMask(d, hn::Or(hn::Gt(lo_v, pos), hn::Gt(pos, hi_v)));
          sv = hn::IfThenElse(invalid, neg_inf, sv);
        }
        hn::StoreU(sv, d, sp);
        mx = hn::Max(mx, sv);
      }
      const VF m_old = hn::LoadU(d, s.m.data() + v * N);
      const VF m_new = hn::Max(m_old, mx);
      // Rows with nothing visible yet keep m = -inf; subtracting 0 keeps their exp() at 0.
      const VF safe = hn::IfThenElse(hn::Eq(m_new, neg_inf), hn::Zero(d), m_new);
      alpha[v] = hn::Exp(d, hn::Sub(m_old, safe));
      VF sum = hn::Zero(d);
      for (int64_t j = 0; j < cn; ++j) {
        float* sp = sc + j * Rp + v * N;
        const VF pj = hn::Exp(d, hn::Sub(hn::LoadU(d, sp), safe));
        hn::StoreU(pj, d, sp);
        sum = hn::Add(sum, pj);
      }
      hn::StoreU(m_new, d, s.m.data() + v * N);
      hn::StoreU(hn::MulAdd(hn::LoadU(d, s.l.data() + v * N), alpha[v], sum), d, s.l.data() + v * N);
      if (!hn::AllTrue(d, hn::Eq(alpha[v], one))) rescale = true;
    }
    if (rescale) {
      for (int64_t k = 0; k < D; ++k)
        for (int v = 0; v < NV; ++v) {
          float* ap = acc + k * Rp + v * N;
          hn::StoreU(hn::Mul(hn::LoadU(d, ap), alpha[v]), d, ap);
        }
    }

    // acc^T[k][rows] += sum_i p[i][rows] * V_i[k], four head dims at a time.
    int64_t k = 0;
    for (; k + 4 <= D; k += 4) {
      VF a0[NV], a1[NV], a2[NV], a3[NV];
      for (int v = 0; v < NV; ++v) {
        a0[v] = hn::LoadU(d, acc + (k + 0) * Rp + v * N);
        a1[v] = hn::LoadU(d, acc + (k + 1) * Rp + v * N);
        a2[v] = hn::LoadU(d, acc + (k + 2) * Rp + v * N);
        a3[v] = hn::LoadU(d, acc + (k + 3) * Rp + v * N);
      }
      for (int64_t j = 0; j < cn; ++j) {
        const float* vr = vp[j] + k;
        const VF b0 = hn::Set(d, vr[0]), b1 = hn::Set(d, vr[1]), b2 = hn::Set(d, vr[2]), b3 = hn::Set(d, vr[3]);
        for (int v = 0; v < NV; ++v) {
          const VF pv = hn::LoadU(d, sc + j * Rp + v * N);
          a0[v] = hn::MulAdd(pv, b0, a0[v]);
          a1[v] = hn::MulAdd(pv, b1, a1[v]);
          a2[v] = hn::MulAdd(pv, b2, a2[v]);
          a3[v] = hn::MulAdd(pv, b3, a3[v]);
        }
      }
      for (int v = 0; v < NV; ++v) {
        hn::StoreU(a0[v], d, acc + (k + 0) * Rp + v * N);
        hn::StoreU(a1[v], d, acc + (k + 1) * Rp + v * N);
        hn::StoreU(a2[v], d, acc + (k + 2) * Rp + v * N);
        hn::StoreU(a3[v], d, acc + (k + 3) * Rp + v * N);
      }
    }
    for (; k < D; ++k) {
      VF a[NV];
      for (int v = 0; v < NV; ++v) a[v] = hn::LoadU(d, acc + k * Rp + v * N);
      for (int64_t j = 0; j < cn; ++j) {
        const VF b = hn::Set(d, vp[j][k]);
        for (int v = 0; v < NV; ++v) a[v] = hn::MulAdd(hn::LoadU(d, sc + j * Rp + v * N), b, a[v]);
      }
      for (int v = 0; v < NV; ++v) hn::StoreU(a[v], d, acc + k * Rp + v * N);
    }
  }

  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tile.t0 + r / ng, h = tile.kv_head * group + tile.g0 + r % ng;
    float* o = job.out + (seq.q_begin + t) * job.out_stride + h * D;
    const float inv_l = 1.0f / s.l[static_cast<size_t>(r)];
    for (int64_t k = 0; k < D; ++k) o[k] = acc[k * Rp + r] * inv_l;
  }
}

// --- head_dim in lanes -----------------------------------------------------------------------
// Buffers: a = q rows [R][D] (pre-scaled), b = acc rows [R][D], c = scores/probabilities [R][chunk].

// Horizontal sums of four vectors, written to out[0..3]. Interleaving pairs within 128-bit
// blocks, then folding blocks, costs about a third of four separate reductions.
HWY_INLINE void Sum4(DF d, VF a0, VF a1, VF a2, VF a3, float* out) {
#if HWY_TARGET == HWY_SCALAR || !HWY_HAVE_FLOAT64
  out[0] = hn::GetLane(hn::SumOfLanes(d, a0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, a1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, a2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, a3));
#else
  // Per block: s01 = [a0 0+2, a1 0+2, a0 1+3, a1 1+3], s23 likewise for a2, a3.
  const VF s01 = hn::Add(hn::InterleaveLower(d, a0, a1), hn::InterleaveUpper(d, a0, a1));
  const VF s23 = hn::Add(hn::InterleaveLower(d, a2, a3), hn::InterleaveUpper(d, a2, a3));
  // 64-bit interleave: per block [a0, a1, a2, a3] partial sums.
  const hn::Repartition<double, DF> dd;
  const auto w01 = hn::BitCast(dd, s01), w23 = hn::BitCast(dd, s23);
  const VF s = hn::Add(hn::BitCast(d, hn::InterleaveLower(dd, w01, w23)),
                       hn::BitCast(d, hn::InterleaveUpper(dd, w01, w23)));
  HWY_ALIGN float buf[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(s, d, buf);
  const size_t N = hn::Lanes(d);
  float r0 = buf[0], r1 = buf[1], r2 = buf[2], r3 = buf[3];
  for (size_t b = 4; b < N; b += 4) {
    r0 += buf[b];
    r1 += buf[b + 1];
    r2 += buf[b + 2];
    r3 += buf[b + 3];
  }
  out[0] = r0;
  out[1] = r1;
  out[2] = r2;
  out[3] = r3;
#endif
}

// Scores of NR rows against K row kr.
template <int NR>
HWY_INLINE void DotRows(const float* const* qr, const float* kr, int64_t D, int64_t D_vec, float* out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF a[NR];
  for (int j = 0; j < NR; ++j) a[j] = hn::Zero(d);
  for (int64_t k = 0; k < D_vec; k += N) {
    const VF kv = hn::LoadU(d, kr + k);
    for (int j = 0; j < NR; ++j) a[j] = hn::MulAdd(hn::LoadU(d, qr[j] + k), kv, a[j]);
  }
  if constexpr (NR == 4) {
    Sum4(d, a[0], a[1], a[2], a[3], out);
  } else {
    for (int j = 0; j < NR; ++j) out[j] = hn::GetLane(hn::SumOfLanes(d, a[j]));
  }
  for (int64_t k = D_vec; k < D; ++k)
    for (int j = 0; j < NR; ++j) out[j] += qr[j][k] * kr[k];
}

// acc rows += p[row][i] * V_i over the chunk, for NR rows, KB vectors of head_dim at a time
// kept in registers.
template <int NR, int KB>
HWY_INLINE void AxpyBlock(float* const* acc, const float* const* pr, const float* const* vp, int64_t cn, int64_t k0) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF a[NR][KB];
  for (int j = 0; j < NR; ++j)
    for (int b = 0; b < KB; ++b) a[j][b] = hn::LoadU(d, acc[j] + k0 + b * N);
  for (int64_t i = 0; i < cn; ++i) {
    VF v[KB];
    for (int b = 0; b < KB; ++b) v[b] = hn::LoadU(d, vp[i] + k0 + b * N);
    for (int j = 0; j < NR; ++j) {
      const VF pj = hn::Set(d, pr[j][i]);
      for (int b = 0; b < KB; ++b) a[j][b] = hn::MulAdd(pj, v[b], a[j][b]);
    }
  }
  for (int j = 0; j < NR; ++j)
    for (int b = 0; b < KB; ++b) hn::StoreU(a[j][b], d, acc[j] + k0 + b * N);
}

template <int NR>
HWY_INLINE void AxpyRows(float* const* acc, const float* const* pr, const float* const* vp, int64_t cn, int64_t D,
                         int64_t D_vec) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  // Accumulators for NR rows × KB vectors: 16 of AVX-512's 32 registers, 8 of AVX2's 16.
  constexpr int KB = (HWY_TARGET <= HWY_AVX3 ? 16 : 8) / NR > 0 ? (HWY_TARGET <= HWY_AVX3 ? 16 : 8) / NR : 1;
  int64_t k = 0;
  for (; k + KB * N <= D_vec; k += KB * N) AxpyBlock<NR, KB>(acc, pr, vp, cn, k);
  for (; k < D_vec; k += N) AxpyBlock<NR, 1>(acc, pr, vp, cn, k);
  for (k = D_vec; k < D; ++k)
    for (int j = 0; j < NR; ++j) {
      float sum = acc[j][k];
      for (int64_t i = 0; i < cn; ++i) sum += pr[j][i] * vp[i][k];
      acc[j][k] = sum;
    }
}

void TileDimsInLanes(const Job& job, const Tile& tile, Scratch& s) {
  const DF d;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const AttentionParams& p = job.p;
  const int64_t D = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  const int64_t D_vec = D / N * N;
  const AttentionSequence& seq = job.seqs[tile.seq];
  const int64_t ng = tile.g1 - tile.g0;
  const int64_t R = (tile.t1 - tile.t0) * ng;
  // Score rows are read in whole vectors: the chunk must be a multiple of the lane count.
  const int64_t C = std::max<int64_t>(attention_detail::kChunkDimsInLanes, N);

  s.a.resize(static_cast<size_t>(R * D));
  s.b.assign(static_cast<size_t>(R * D), 0.0f);
  s.c.resize(static_cast<size_t>(R * C));
  s.m.assign(static_cast<size_t>(R), -std::numeric_limits<float>::infinity());
  s.l.assign(static_cast<size_t>(R), 0.0f);
  s.lo.resize(static_cast<size_t>(R));
  s.hi.resize(static_cast<size_t>(R));
  // Row pointers of the current chunk and of the next one, whose rows are prefetched while
  // the current chunk computes: a kv head's rows are num_kv_heads * head_dim floats apart,
  // a stride the hardware prefetcher follows poorly across 4 KiB pages.
  s.kp.resize(2 * C);
  s.vp.resize(2 * C);
  const float** kp = s.kp.data();
  const float** vp = s.vp.data();
  const float** kp_next = kp + C;
  const float** vp_next = vp + C;
  const int64_t row_bytes = D * static_cast<int64_t>(sizeof(float));
  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tile.t0 + r / ng, h = tile.kv_head * group + tile.g0 + r % ng;
    const float* qr = job.q + (seq.q_begin + t) * job.q_stride + h * D;
    for (int64_t k = 0; k < D; ++k) s.a[static_cast<size_t>(r * D + k)] = qr[k] * p.scale;
    const int64_t pos = seq.positions[t];
    s.lo[static_cast<size_t>(r)] = static_cast<int32_t>(attention_detail::window_lo(pos, p.sliding_window));
    s.hi[static_cast<size_t>(r)] = static_cast<int32_t>(pos);
  }

  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  const bool softcap = p.softcap > 0.0f;
  const VF cap = hn::Set(d, p.softcap);
  const VF inv_cap = hn::Set(d, softcap ? 1.0f / p.softcap : 0.0f);
  const float* q_rows[4];
  float* acc_rows[4];
  const float* p_rows[4];
  float dots[4];

  // Chunks start at absolute multiples of C, not at the tile's first position, so a
  // query row goes through the same online-softmax steps whatever rows share its
  // tile: a request's output does not depend on its batch mates or on chunking.
  const int64_t first = tile.span_lo - tile.span_lo % C;
  attention_detail::kv_rows(seq.kv, p.num_kv_heads, D, tile.kv_head, first,
                            std::min(C, tile.span_hi - first + 1), kp, vp);
  for (int64_t c0 = first; c0 <= tile.span_hi; c0 += C) {
    const int64_t cn = std::min(C, tile.span_hi - c0 + 1);
    const int64_t next_cn = std::min(C, tile.span_hi - (c0 + C) + 1);
    if (next_cn > 0)
      attention_detail::kv_rows(seq.kv, p.num_kv_heads, D, tile.kv_head, c0 + C, next_cn, kp_next, vp_next);

    for (int64_t i = 0; i < cn; ++i) {
      const float* kr = kp[i];
      if (i < next_cn) {
        for (int64_t b = 0; b < row_bytes; b += 64) {
          hwy::Prefetch(reinterpret_cast<const char*>(kp_next[i]) + b);
          hwy::Prefetch(reinterpret_cast<const char*>(vp_next[i]) + b);
        }
      }
      for (int64_t r = 0; r < R; r += 4) {
        const int64_t nr = std::min<int64_t>(4, R - r);
        for (int64_t j = 0; j < nr; ++j) q_rows[j] = s.a.data() + (r + j) * D;
        switch (nr) {
          case 4: DotRows<4>(q_rows, kr, D, D_vec, dots); break;
          case 3: DotRows<3>(q_rows, kr, D, D_vec, dots); break;
          case 2: DotRows<2>(q_rows, kr, D, D_vec, dots); break;
          default: DotRows<1>(q_rows, kr, D, D_vec, dots); break;
        }
        for (int64_t j = 0; j < nr; ++j) s.c[static_cast<size_t>((r + j) * C + i)] = dots[j];
      }
    }

    for (int64_t r = 0; r < R; ++r) {
      float* row = s.c.data() + r * C;
      const auto lo_v = hn::Set(di, s.lo[static_cast<size_t>(r)]);
      const auto hi_v = hn::Set(di, static_cast<int32_t>(std::min<int64_t>(s.hi[static_cast<size_t>(r)], c0 + cn - 1)));
      VF mx = neg_inf;
      for (int64_t i = 0; i < cn; i += N) {
        VF sv = hn::LoadU(d, row + i);
        if (softcap) sv = hn::Mul(cap, hn::Tanh(d, hn::Mul(sv, inv_cap)));
        const auto pos = hn::Iota(di, static_cast<int32_t>(c0 + i));
        const auto invalid = hn::RebindMask(d, hn::Or(hn::Gt(lo_v, pos), hn::Gt(pos, hi_v)));
        sv = hn::IfThenElse(invalid, neg_inf, sv);
        hn::StoreU(sv, d, row + i);
        mx = hn::Max(mx, sv);
      }
      const float m_old = s.m[static_cast<size_t>(r)];
      const float m_new = std::max(m_old, hn::GetLane(hn::MaxOfLanes(d, mx)));
      const float safe = m_new == -std::numeric_limits<float>::infinity() ? 0.0f : m_new;
      const float alpha = std::exp(m_old - safe);
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
      switch (nr) {
        case 4: AxpyRows<4>(acc_rows, p_rows, vp, cn, D, D_vec); break;
        case 3: AxpyRows<3>(acc_rows, p_rows, vp, cn, D, D_vec); break;
        case 2: AxpyRows<2>(acc_rows, p_rows, vp, cn, D, D_vec); break;
        default: AxpyRows<1>(acc_rows, p_rows, vp, cn, D, D_vec); break;
      }
    }
    std::swap(kp, kp_next);
    std::swap(vp, vp_next);
  }

  for (int64_t r = 0; r < R; ++r) {
    const int64_t t = tile.t0 + r / ng, h = tile.kv_head * group + tile.g0 + r % ng;
    float* o = job.out + (seq.q_begin + t) * job.out_stride + h * D;
    const float* ar = s.b.data() + r * D;
    const float inv_l = 1.0f / s.l[static_cast<size_t>(r)];
    for (int64_t k = 0; k < D; ++k) o[k] = ar[k] * inv_l;
  }
}

void RunTile(const Job& job, const Tile& tile, Scratch& s) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  // Every tile takes the per-row path: which path a row took must not depend on
  // how many rows share its tile, or batching would change its result. The
  // rows-in-lanes path (TileRowsInLanes) is faster for long prefills but not
  // batch-invariant; prefill attention is a few % of a prefill step.
  (void)N;
  TileDimsInLanes(job, tile, s);
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
  std::stable_sort(tiles.begin(), tiles.end(), [](const Tile& a, const Tile& b) { return a.cost > b.cost; });

  const Job job{q, q_stride, seqs, p, out, out_stride};
  const Tile* tile_list = tiles.data();
  const int64_t num_tiles = static_cast<int64_t>(tiles.size());
  std::atomic<int64_t> next{0};
  auto work = [&](int64_t, int64_t, int) {
    thread_local Scratch scratch;
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < num_tiles;
         i = next.fetch_add(1, std::memory_order_relaxed))
      RunTile(job, tile_list[i], scratch);
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
