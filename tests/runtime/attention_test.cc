// paged_attention against paged_attention_ref on every compiled SIMD target, and the reference
// itself against a dense implementation (full K/V copy, explicit mask matrix, plain softmax).
#include "loom/runtime/cpu/attention.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace loom::cpu {
namespace {

// A sequence's K/V stored in separately allocated pages, as a cache owner would hold them.
// Pages wholly before `first_live` are null (dropped out of a sliding window); slots of the
// last page past num_tokens hold NaN so that a kernel reading them would poison its output.
struct PagedKv {
  int64_t page_size = 0, num_kv_heads = 0, head_dim = 0, num_tokens = 0;
  DType dtype = DType::kF32;
  std::vector<std::unique_ptr<std::vector<float>>> k_store, v_store;
  std::vector<std::unique_ptr<std::vector<uint16_t>>> k_bf16, v_bf16;
  std::vector<const void*> k_ptrs, v_ptrs;

  PagedKv(int64_t tokens, int64_t ps, int64_t kv_heads, int64_t d, std::mt19937& rng, int64_t first_live = 0)
      : page_size(ps), num_kv_heads(kv_heads), head_dim(d), num_tokens(tokens) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t pages = (tokens + ps - 1) / ps;
    const int64_t page_elems = ps * kv_heads * d;
    for (int64_t p = 0; p < pages; ++p) {
      if ((p + 1) * ps <= first_live) {
        k_store.emplace_back(nullptr);
        v_store.emplace_back(nullptr);
        k_ptrs.push_back(nullptr);
        v_ptrs.push_back(nullptr);
        continue;
      }
      auto k = std::make_unique<std::vector<float>>(page_elems, std::numeric_limits<float>::quiet_NaN());
      auto v = std::make_unique<std::vector<float>>(page_elems, std::numeric_limits<float>::quiet_NaN());
      for (int64_t slot = 0; slot < ps && p * ps + slot < tokens; ++slot)
        for (int64_t h = 0; h < kv_heads; ++h)
          for (int64_t j = 0; j < d; ++j) {
            (*k)[static_cast<size_t>(k_page_index(slot, h, j, ps, d))] = nd(rng);
            (*v)[static_cast<size_t>(v_page_index(slot, h, j, ps, d))] = nd(rng);
          }
      k_ptrs.push_back(k->data());
      v_ptrs.push_back(v->data());
      k_store.push_back(std::move(k));
      v_store.push_back(std::move(v));
    }
  }
  KvPages view() const {
    return {k_ptrs.data(), v_ptrs.data(), static_cast<int64_t>(k_ptrs.size()), page_size, num_tokens,
            graph::KvFormat{dtype, dtype, false, false}};
  }
  // Rounds every page to bf16 (NaN padding stays NaN), as a bf16 cache stores what is written.
  void to_bf16() {
    auto round = [](const std::vector<float>& src) {
      auto dst = std::make_unique<std::vector<uint16_t>>(src.size());
      for (size_t i = 0; i < src.size(); ++i) (*dst)[i] = f32_to_bf16(src[i]);
      return dst;
    };
    for (size_t p = 0; p < k_store.size(); ++p) {
      if (!k_store[p]) continue;
      k_bf16.push_back(round(*k_store[p]));
      v_bf16.push_back(round(*v_store[p]));
      k_ptrs[p] = k_bf16.back()->data();
      v_ptrs[p] = v_bf16.back()->data();
    }
    dtype = DType::kBF16;
  }
  // K or V value, NaN where the page is gone.
  float at(bool key, int64_t pos, int64_t h, int64_t d) const {
    const void* page = (key ? k_ptrs : v_ptrs)[static_cast<size_t>(pos / page_size)];
    if (page == nullptr) return std::numeric_limits<float>::quiet_NaN();
    return key ? kv_element(page, k_page_index(pos % page_size, h, d, page_size, head_dim), dtype)
               : kv_element(page, v_page_index(pos % page_size, h, d, page_size, head_dim), dtype);
  }
};

// Dense attention: copies K/V of every position into one [num_tokens, kv_heads, head_dim] array,
// builds the [q_len, num_tokens] mask from the causal and sliding-window rules, and takes a
// plain softmax over the allowed scores.
void dense_attention(const float* q, int64_t q_stride, const std::vector<AttentionSequence>& seqs,
                     const std::vector<const PagedKv*>& kvs, const AttentionParams& p, float* out, int64_t out_stride) {
  const int64_t D = p.head_dim, Hq = p.num_q_heads, Hkv = p.num_kv_heads;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const AttentionSequence& seq = seqs[s];
    const PagedKv& kv = *kvs[s];
    const int64_t T = kv.num_tokens;
    std::vector<double> K(static_cast<size_t>(T * Hkv * D)), V(K.size());
    for (int64_t c = 0; c < T; ++c)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t d = 0; d < D; ++d) {
          K[static_cast<size_t>((c * Hkv + h) * D + d)] = kv.at(true, c, h, d);
          V[static_cast<size_t>((c * Hkv + h) * D + d)] = kv.at(false, c, h, d);
        }
    std::vector<char> mask(static_cast<size_t>(seq.q_len * T));
    for (int64_t t = 0; t < seq.q_len; ++t)
      for (int64_t c = 0; c < T; ++c) {
        const int64_t pos = seq.positions[t];
        mask[static_cast<size_t>(t * T + c)] = c <= pos && (p.sliding_window == 0 || pos - c < p.sliding_window);
      }
    for (int64_t t = 0; t < seq.q_len; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kvh = h * Hkv / Hq;
        const float* qr = q + (seq.q_begin + t) * q_stride + h * D;
        std::vector<double> sc(static_cast<size_t>(T), -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < T; ++c) {
          if (!mask[static_cast<size_t>(t * T + c)]) continue;
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qr[d] * K[static_cast<size_t>((c * Hkv + kvh) * D + d)];
          dot *= p.scale;
          if (p.softcap > 0) dot = std::tanh(dot / p.softcap) * p.softcap;
          sc[static_cast<size_t>(c)] = dot;
          mx = std::max(mx, dot);
        }
        // A sink (gpt-oss) is one more logit in the denominator with no value.
        if (p.sinks) mx = std::max(mx, static_cast<double>(p.sinks[h]));
        double sum = p.sinks ? std::exp(p.sinks[h] - mx) : 0.0;
        std::vector<double> o(static_cast<size_t>(D), 0.0);
        for (int64_t c = 0; c < T; ++c) {
          if (!mask[static_cast<size_t>(t * T + c)]) continue;
          const double w = std::exp(sc[static_cast<size_t>(c)] - mx);
          sum += w;
          for (int64_t d = 0; d < D; ++d) o[static_cast<size_t>(d)] += w * V[static_cast<size_t>((c * Hkv + kvh) * D + d)];
        }
        for (int64_t d = 0; d < D; ++d)
          out[(seq.q_begin + t) * out_stride + h * D + d] = static_cast<float>(o[static_cast<size_t>(d)] / sum);
      }
  }
}

struct Case {
  std::string name;
  AttentionParams p;
  std::vector<std::unique_ptr<PagedKv>> kvs;
  std::vector<std::vector<int32_t>> positions;
  std::vector<AttentionSequence> seqs;
  std::vector<float> q;
  std::vector<float> sinks;  // p.sinks points here when set
  int64_t q_stride = 0, out_stride = 0, total_q = 0;
};

// The case with one sink logit per q head, drawn around the scores' scale (some
// far above it, so the sink takes most of a row's mass, some far below).
Case with_sinks(Case c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  c.sinks.resize(static_cast<size_t>(c.p.num_q_heads));
  for (float& v : c.sinks) v = nd(rng);
  c.sinks[0] = 30.0f;
  if (c.sinks.size() > 1) c.sinks[1] = -30.0f;
  c.p.sinks = c.sinks.data();
  c.name += "_sinks";
  return c;
}

struct SeqSpec {
  int64_t num_tokens;
  std::vector<int32_t> positions;
  int64_t q_begin = -1;  // -1: after the previous sequence
};

std::vector<int32_t> range_positions(int64_t first, int64_t count) {
  std::vector<int32_t> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(first + i);
  return v;
}

// q rows get `stride_pad` extra elements per token (a fused QKV row); q values × q_gain make the
// softmax peakier, exercising the online rescaling.
Case make_case(const std::string& name, int64_t hq, int64_t hkv, int64_t d, int64_t page_size,
               const std::vector<SeqSpec>& specs, int64_t window = 0, float softcap = 0, int64_t stride_pad = 0,
               float q_gain = 1.0f, uint32_t seed = 1) {
  std::mt19937 rng(seed);
  Case c;
  c.name = name;
  c.p = {hq, hkv, d, 1.0f / std::sqrt(static_cast<float>(d)), window, softcap};
  c.q_stride = hq * d + stride_pad;
  c.out_stride = hq * d + stride_pad + 3;
  for (const SeqSpec& sp : specs) {
    int64_t first_live = 0;
    if (window > 0 && !sp.positions.empty()) {
      const int64_t min_pos = *std::min_element(sp.positions.begin(), sp.positions.end());
      first_live = std::max<int64_t>(0, min_pos - window + 1);
    }
    c.kvs.push_back(std::make_unique<PagedKv>(sp.num_tokens, page_size, hkv, d, rng, first_live));
    c.positions.push_back(sp.positions);
  }
  for (size_t s = 0; s < specs.size(); ++s) {
    const int64_t q_len = static_cast<int64_t>(c.positions[s].size());
    const int64_t q_begin = specs[s].q_begin >= 0 ? specs[s].q_begin : c.total_q;
    c.seqs.push_back({q_begin, q_len, c.positions[s].data(), c.kvs[s]->view()});
    c.total_q = std::max(c.total_q, q_begin + q_len);
  }
  std::normal_distribution<float> nd(0.0f, q_gain);
  c.q.resize(static_cast<size_t>(c.total_q * c.q_stride));
  for (float& v : c.q) v = nd(rng);
  return c;
}

// Fails with the first few mismatching (row, element) pairs; NaN anywhere fails.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, int64_t stride, int64_t row_len,
                  int64_t rows, double atol, double rtol, const std::string& what) {
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < row_len; ++i) {
      const float g = got[static_cast<size_t>(r * stride + i)], w = want[static_cast<size_t>(r * stride + i)];
      if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
        if (bad < 5)
          ADD_FAILURE() << what << ": row " << r << " elem " << i << " got " << g << " want " << w;
        ++bad;
      }
    }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " mismatches";
}

std::vector<float> run_ref(const Case& c) {
  std::vector<float> out(static_cast<size_t>(c.total_q * c.out_stride), -7.0f);  // rows no sequence owns stay -7
  paged_attention_ref(c.q.data(), c.q_stride, c.seqs.data(), static_cast<int64_t>(c.seqs.size()), c.p, out.data(),
                      c.out_stride);
  return out;
}

// Runs the optimized kernel on every SIMD target and with 1 and 2 threads against the reference.
// Padding between rows must stay untouched.
void check_against_ref(const Case& c) {
  SCOPED_TRACE(c.name);
  const std::vector<float> want = run_ref(c);
  const int64_t row = c.p.num_q_heads * c.p.head_dim;
  ThreadPool one(1), two(2);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (ThreadPool* pool : {&two, &one}) {
      SCOPED_TRACE(std::string(hwy::TargetName(target)) + " threads=" + std::to_string(pool->num_threads()));
      std::vector<float> got(want.size(), -7.0f);
      paged_attention(c.q.data(), c.q_stride, c.seqs.data(), static_cast<int64_t>(c.seqs.size()), c.p, got.data(),
                      c.out_stride, *pool);
      expect_close(got, want, c.out_stride, row, c.total_q, 2e-5, 2e-5, c.name);
      for (int64_t r = 0; r < c.total_q; ++r)
        for (int64_t i = row; i < c.out_stride; ++i)
          ASSERT_EQ(got[static_cast<size_t>(r * c.out_stride + i)], -7.0f) << "wrote past a row at " << r;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

struct HeadConfig {
  int64_t hq, hkv, d;
};
const HeadConfig kHeads[] = {{4, 4, 64}, {8, 2, 64}, {4, 1, 128}, {6, 2, 80}, {3, 1, 37}};

std::string head_name(const HeadConfig& h) {
  return "hq" + std::to_string(h.hq) + "_hkv" + std::to_string(h.hkv) + "_d" + std::to_string(h.d);
}

TEST(PagedAttention, ReferenceMatchesDenseAttention) {
  std::vector<Case> cases;
  cases.push_back(make_case("prefill", 4, 2, 16, 7, {{23, range_positions(0, 23)}}));
  cases.push_back(make_case("decode", 8, 2, 8, 16, {{100, {99}}}));
  cases.push_back(make_case("chunked", 4, 1, 12, 5, {{40, range_positions(30, 10)}}));
  cases.push_back(make_case("window", 2, 2, 8, 4, {{50, range_positions(41, 9)}}, /*window=*/6));
  cases.push_back(make_case("window_decode", 4, 2, 8, 3, {{30, {29}}}, /*window=*/1));
  cases.push_back(make_case("softcap", 4, 4, 8, 8, {{20, range_positions(0, 20)}}, 0, /*softcap=*/2.0f, 0, 4.0f));
  cases.push_back(make_case("multi", 4, 2, 8, 6,
                            {{17, range_positions(10, 7), 3}, {5, {4}, 0}, {9, range_positions(0, 9), 11}}, 0, 0,
                            /*stride_pad=*/5));
  cases.push_back(with_sinks(make_case("window", 4, 2, 8, 4, {{50, range_positions(41, 9)}}, /*window=*/6), 3));
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> ref = run_ref(c);
    std::vector<float> dense(ref.size(), -7.0f);
    std::vector<const PagedKv*> kvs;
    for (const auto& kv : c.kvs) kvs.push_back(kv.get());
    dense_attention(c.q.data(), c.q_stride, c.seqs, kvs, c.p, dense.data(), c.out_stride);
    expect_close(ref, dense, c.out_stride, c.p.num_q_heads * c.p.head_dim, c.total_q, 1e-6, 1e-6, c.name);
  }
}

TEST(PagedAttention, SingleSequencePrefill) {
  for (const HeadConfig& h : kHeads)
    for (int64_t page_size : {16, 256, 7})
      for (int64_t n : {1, 2, 17, 64, 300}) {
        if (page_size == 256 && n < 64) continue;  // one partial page: covered by the other sizes
        check_against_ref(make_case("prefill_" + head_name(h) + "_ps" + std::to_string(page_size) + "_n" +
                                        std::to_string(n),
                                    h.hq, h.hkv, h.d, page_size, {{n, range_positions(0, n)}}));
      }
}

TEST(PagedAttention, DecodeLongContext) {
  for (const HeadConfig& h : kHeads)
    for (int64_t page_size : {16, 256, 7})
      for (int64_t n : {1, 100, 2049})
        check_against_ref(make_case("decode_" + head_name(h) + "_ps" + std::to_string(page_size) + "_n" +
                                        std::to_string(n),
                                    h.hq, h.hkv, h.d, page_size, {{n, {static_cast<int32_t>(n - 1)}}}));
}

TEST(PagedAttention, ChunkedPrefillContinuesPositions) {
  for (const HeadConfig& h : kHeads) {
    // The second chunk of a prompt: 37 new tokens after 163 cached ones.
    check_against_ref(make_case("chunk_" + head_name(h), h.hq, h.hkv, h.d, 16, {{200, range_positions(163, 37)}}));
    // A chunk whose K/V are written but whose queries are not the last tokens in the cache.
    check_against_ref(make_case("chunk_mid_" + head_name(h), h.hq, h.hkv, h.d, 7, {{90, range_positions(40, 11)}}));
  }
}

TEST(PagedAttention, SeveralSequencesOfDifferentLengths) {
  for (const HeadConfig& h : {kHeads[1], kHeads[3], kHeads[4]}) {
    // A continuous-batching step: decodes of different lengths, a prompt chunk and a full prompt,
    // with rows of the sequences in a different order than the sequences themselves.
    check_against_ref(make_case("batch_" + head_name(h), h.hq, h.hkv, h.d, 16,
                                {{513, {512}, 40},
                                 {3, {2}, 0},
                                 {77, range_positions(50, 27), 41},
                                 {31, range_positions(0, 31), 1},
                                 {1, {0}, 32},
                                 {250, {249}, 33}},
                                0, 0, /*stride_pad=*/2 * h.hkv * h.d));
    std::vector<SeqSpec> decodes;
    for (int i = 0; i < 24; ++i) decodes.push_back({1 + 37 * i, {static_cast<int32_t>(36 * i)}});
    check_against_ref(make_case("decode_batch_" + head_name(h), h.hq, h.hkv, h.d, 7, decodes));
  }
}

TEST(PagedAttention, SlidingWindowWithDroppedPages) {
  for (const HeadConfig& h : {kHeads[0], kHeads[1], kHeads[4]})
    for (int64_t window : {1, 5, 64})
      for (int64_t page_size : {16, 7}) {
        const std::string tag = head_name(h) + "_w" + std::to_string(window) + "_ps" + std::to_string(page_size);
        check_against_ref(make_case("window_decode_" + tag, h.hq, h.hkv, h.d, page_size, {{300, {299}}}, window));
        check_against_ref(
            make_case("window_chunk_" + tag, h.hq, h.hkv, h.d, page_size, {{300, range_positions(230, 70)}}, window));
        check_against_ref(
            make_case("window_prefill_" + tag, h.hq, h.hkv, h.d, page_size, {{150, range_positions(0, 150)}}, window));
      }
}

TEST(PagedAttention, Softcap) {
  for (const HeadConfig& h : {kHeads[0], kHeads[1], kHeads[4]}) {
    check_against_ref(make_case("softcap_prefill_" + head_name(h), h.hq, h.hkv, h.d, 16,
                                {{70, range_positions(0, 70)}}, 0, 50.0f, 0, 6.0f));
    check_against_ref(
        make_case("softcap_decode_" + head_name(h), h.hq, h.hkv, h.d, 7, {{400, {399}}}, 0, 5.0f, 0, 6.0f));
    check_against_ref(make_case("softcap_window_" + head_name(h), h.hq, h.hkv, h.d, 16,
                                {{200, range_positions(150, 50)}}, 32, 30.0f, 0, 6.0f));
  }
}

// gpt-oss's sinks on prefill, chunked prefill, decode and sliding windows; the
// sink is added once the row's running maximum is known.
TEST(PagedAttention, Sinks) {
  uint32_t seed = 40;
  for (const HeadConfig& h : {kHeads[0], kHeads[1], kHeads[4]}) {
    check_against_ref(with_sinks(make_case("prefill_" + head_name(h), h.hq, h.hkv, h.d, 16, {{70, range_positions(0, 70)}}), seed++));
    check_against_ref(with_sinks(make_case("decode_" + head_name(h), h.hq, h.hkv, h.d, 7, {{400, {399}}}, 0, 0, 0, 6.0f), seed++));
    check_against_ref(with_sinks(make_case("window_" + head_name(h), h.hq, h.hkv, h.d, 16, {{200, range_positions(150, 50)}}, 32), seed++));
  }
  // The sink changes the output (it is not dropped on the way).
  Case c = make_case("changes", 4, 2, 16, 8, {{20, range_positions(0, 20)}});
  const std::vector<float> plain = run_ref(c);
  c = with_sinks(std::move(c), 9);
  const std::vector<float> sunk = run_ref(c);
  double moved = 0;
  for (size_t i = 0; i < plain.size(); ++i) moved = std::max(moved, std::fabs(static_cast<double>(plain[i]) - sunk[i]));
  EXPECT_GT(moved, 0.1);
}

TEST(PagedAttention, PeakySoftmaxAndStridedRows) {
  // Large logits: the running max moves often and exp() underflows for most positions.
  for (const HeadConfig& h : kHeads)
    check_against_ref(make_case("peaky_" + head_name(h), h.hq, h.hkv, h.d, 16, {{260, range_positions(0, 260)}}, 0,
                                0, /*stride_pad=*/11, /*q_gain=*/12.0f));
}

TEST(PagedAttention, NestedInsideAParallelRegion) {
  // Called from a pool worker, the kernel must run inline and still be right.
  Case c = make_case("nested", 8, 2, 64, 16, {{150, range_positions(0, 150)}});
  const std::vector<float> want = run_ref(c);
  ThreadPool pool(2);
  std::vector<std::vector<float>> got(2, std::vector<float>(want.size(), 0.0f));
  pool.parallel_for(2, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i)
      paged_attention(c.q.data(), c.q_stride, c.seqs.data(), 1, c.p, got[static_cast<size_t>(i)].data(),
                      c.out_stride, pool);
  });
  for (const auto& g : got) expect_close(g, want, c.out_stride, 8 * 64, c.total_q, 2e-5, 2e-5, "nested");
}

TEST(PagedAttention, RowResultDoesNotDependOnItsTileOrChunk) {
  // The batching contract: a query row gives the same bits whether it is decoded alone, part
  // of a whole prefill, or of a prefill chunk cut anywhere, on every target and thread count.
  for (const HeadConfig& h : kHeads)
    for (int64_t page_size : {16, 7}) {
      const int64_t n = 150;
      const Case whole = make_case("whole", h.hq, h.hkv, h.d, page_size, {{n, range_positions(0, n)}});
      const int64_t row = h.hq * h.d;
      for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " " + head_name(h) + " ps" + std::to_string(page_size));
        ThreadPool two(2);
        std::vector<float> all(whole.q.size() + 3 * static_cast<size_t>(n));
        paged_attention(whole.q.data(), whole.q_stride, whole.seqs.data(), 1, whole.p, all.data(), whole.out_stride,
                        two);
        // The same queries in chunks [t0, t1), over the same K/V, one at a time and as one batch.
        for (int64_t chunk : {int64_t{1}, int64_t{5}, int64_t{64}}) {
          std::vector<std::vector<int32_t>> pos;
          std::vector<AttentionSequence> seqs;
          for (int64_t t0 = 0; t0 < n; t0 += chunk) pos.push_back(range_positions(t0, std::min(chunk, n - t0)));
          for (size_t i = 0; i < pos.size(); ++i) {
            const int64_t t0 = pos[i].front();
            seqs.push_back({t0, static_cast<int64_t>(pos[i].size()), pos[i].data(), whole.kvs[0]->view()});
          }
          std::vector<float> got(all.size());
          ThreadPool one(1);
          paged_attention(whole.q.data(), whole.q_stride, seqs.data(), static_cast<int64_t>(seqs.size()), whole.p,
                          got.data(), whole.out_stride, chunk == 5 ? one : two);
          for (int64_t r = 0; r < n; ++r)
            for (int64_t i = 0; i < row; ++i)
              ASSERT_EQ(got[static_cast<size_t>(r * whole.out_stride + i)], all[static_cast<size_t>(r * whole.out_stride + i)])
                  << "chunk " << chunk << " row " << r << " elem " << i;
        }
      }
      hwy::SetSupportedTargetsForTest(0);
    }
}

// bf16 pages: the kernel widens K and V on load and must match the reference reading the same
// bf16 values as tightly as for f32 pages; and bf16 rounding must stay a rounding (close to the
// f32 result), not a misread.
void to_bf16(Case& c) {
  for (size_t s = 0; s < c.kvs.size(); ++s) {
    c.kvs[s]->to_bf16();
    c.seqs[s].kv = c.kvs[s]->view();
  }
}

TEST(PagedAttention, Bf16PagesMatchReference) {
  std::vector<Case> cases;
  for (const HeadConfig& h : kHeads)
    for (int64_t page_size : {16, 64, 7})
      cases.push_back(make_case("bf16_prefill_" + head_name(h) + "_ps" + std::to_string(page_size), h.hq, h.hkv, h.d,
                                page_size, {{150, range_positions(0, 150)}}));
  cases.push_back(make_case("bf16_decode_batch", 8, 2, 64, 16,
                            {{300, {299}}, {17, {16}}, {1, {0}}, {129, {128}}}));
  cases.push_back(make_case("bf16_chunked", 8, 2, 64, 16, {{200, range_positions(120, 80)}}));
  cases.push_back(make_case("bf16_window", 4, 2, 64, 8, {{90, range_positions(70, 20)}}, /*window=*/13));
  cases.push_back(make_case("bf16_softcap_peaky", 4, 4, 64, 16, {{70, range_positions(0, 70)}}, 0, 5.0f, 3, 4.0f));
  for (Case& c : cases) {
    const std::vector<float> f32_ref = run_ref(c);
    to_bf16(c);
    check_against_ref(c);
    const std::vector<float> bf16_ref = run_ref(c);
    expect_close(bf16_ref, f32_ref, c.out_stride, c.p.num_q_heads * c.p.head_dim, c.total_q, 3e-2, 3e-2,
                 c.name + " bf16 vs f32");
  }
}

TEST(PagedAttention, RejectsUnsupportedKvDtype) {
  Case c = make_case("q4_k", 4, 2, 8, 4, {{10, range_positions(5, 5)}});
  c.seqs[0].kv.format.v = DType::kQ4_K;
  std::vector<float> out(static_cast<size_t>(c.total_q * c.out_stride));
  ThreadPool pool(1);
  try {
    paged_attention(c.q.data(), c.q_stride, c.seqs.data(), 1, c.p, out.data(), c.out_stride, pool);
    FAIL() << "a Q4_K cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV types F32/Q4_K are not supported"), std::string::npos) << e.what();
  }
}

TEST(PagedAttention, BadArgumentsThrowNamedErrors) {
  Case c = make_case("bad", 4, 2, 8, 4, {{10, range_positions(5, 5)}}, /*window=*/3);
  std::vector<float> out(static_cast<size_t>(c.total_q * c.out_stride));
  ThreadPool pool(2);
  auto run = [&](const AttentionParams& p, std::vector<AttentionSequence> seqs) {
    paged_attention(c.q.data(), c.q_stride, seqs.data(), static_cast<int64_t>(seqs.size()), p, out.data(),
                    c.out_stride, pool);
  };
  auto expect_error = [&](const AttentionParams& p, std::vector<AttentionSequence> seqs, const std::string& needle) {
    try {
      run(p, seqs);
      ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    try {
      paged_attention_ref(c.q.data(), c.q_stride, seqs.data(), static_cast<int64_t>(seqs.size()), p, out.data(),
                          c.out_stride);
      ADD_FAILURE() << "ref: no error, expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  run(c.p, c.seqs);  // the valid call works

  AttentionParams p = c.p;
  p.num_kv_heads = 3;
  expect_error(p, c.seqs, "not a multiple of num_kv_heads");

  std::vector<int32_t> beyond = {5, 6, 7, 8, 10};
  auto seqs = c.seqs;
  seqs[0].positions = beyond.data();
  expect_error(c.p, seqs, "position 10 of token 4 outside the 10 tokens");

  // Window 3 at positions 5..9 reads from position 3 on; page 0 (positions 0..3) is needed.
  std::vector<const void*> k_ptrs = c.kvs[0]->k_ptrs;
  k_ptrs[0] = nullptr;
  seqs = c.seqs;
  seqs[0].kv.k_pages = k_ptrs.data();
  expect_error(c.p, seqs, "page 0");

  seqs = c.seqs;
  seqs[0].kv.num_tokens = 13;  // 3 pages of 4 hold only 12
  expect_error(c.p, seqs, "exceeds num_pages * page_size");
}

}  // namespace
}  // namespace loom::cpu
