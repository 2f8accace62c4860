// Scalar reference for paged_attention: the textbook two-pass softmax per query row, in double,
// reading K/V straight from the pages. Tests hold the optimized kernel against it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "loom/runtime/cpu/attention.h"

namespace loom::cpu {

void paged_attention_ref(const float* q, int64_t q_stride, const AttentionSequence* seqs, int64_t num_seqs,
                         const AttentionParams& p, float* out, int64_t out_stride) {
  throw_if_error(check_paged_attention_args(q, q_stride, seqs, num_seqs, p, out, out_stride));
  const int64_t D = p.head_dim, group = p.num_q_heads / p.num_kv_heads;
  std::vector<double> scores, acc(static_cast<size_t>(D));
  std::vector<float> qrot(static_cast<size_t>(D)), orot(static_cast<size_t>(D));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const AttentionSequence& seq = seqs[s];
    const KvPages& kv = seq.kv;
    // K/V dequantized to f32 as stored (rotated when the cache rotates them).
    auto k_at = [&](int64_t pos, int64_t kvh, int64_t d) {
      return kv_stored_value(kv.k_pages[pos / kv.page_size], kv.format.k, true, pos % kv.page_size, kvh, d,
                             kv.page_size, D);
    };
    auto v_at = [&](int64_t pos, int64_t kvh, int64_t d) {
      return kv_stored_value(kv.v_pages[pos / kv.page_size], kv.format.v, false, pos % kv.page_size, kvh, d,
                             kv.page_size, D);
    };
    for (int64_t t = 0; t < seq.q_len; ++t) {
      const int64_t pos = seq.positions[t];
      const int64_t lo = p.sliding_window > 0 ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
      for (int64_t h = 0; h < p.num_q_heads; ++h) {
        const int64_t kvh = h / group;
        const float* qr = q + (seq.q_begin + t) * q_stride + h * D;
        if (kv.format.rotate_k) {  // H q · H k = q · k
          std::copy(qr, qr + D, qrot.begin());
          kv_rotate(qrot.data(), D);
          qr = qrot.data();
        }
        scores.assign(static_cast<size_t>(pos - lo + 1), 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t c = lo; c <= pos; ++c) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * k_at(c, kvh, d);
          double sc = dot * p.scale;
          if (p.softcap > 0) sc = p.softcap * std::tanh(sc / p.softcap);
          scores[static_cast<size_t>(c - lo)] = sc;
          mx = std::max(mx, sc);
        }
        // gpt-oss's sink: one more logit in the denominator, no value read for it.
        if (p.sinks) mx = std::max(mx, static_cast<double>(p.sinks[h]));
        double sum = p.sinks ? std::exp(static_cast<double>(p.sinks[h]) - mx) : 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t c = lo; c <= pos; ++c) {
          const double w = std::exp(scores[static_cast<size_t>(c - lo)] - mx);
          sum += w;
          for (int64_t d = 0; d < D; ++d) acc[static_cast<size_t>(d)] += w * v_at(c, kvh, d);
        }
        float* o = out + (seq.q_begin + t) * out_stride + h * D;
        for (int64_t d = 0; d < D; ++d) o[d] = static_cast<float>(acc[static_cast<size_t>(d)] / sum);
        if (kv.format.rotate_v) kv_rotate(o, D);  // Σ p H v = H Σ p v, and H H = I
      }
    }
  }
}

}  // namespace loom::cpu
