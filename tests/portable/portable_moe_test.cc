// loom_portable's moe kernels: the grouped kernel (on the cpu_simd and on the
// reference linear) against the scalar reference, at sizes that leave tails
// past the 16 partial sums, every activation, with and without
// renormalisation and a shared expert, f32 and bf16 experts; and the reference
// against a case small enough to work out by hand (routing, ties, shared gate).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "portable/src/moe.h"
#include "portable/portable_test_util.h"

namespace {

using portable_test::max_rel;
using portable_test::random_vec;

// bf16 by truncation (any bf16 value will do) and its exact f32 widening.
void to_bf16(const std::vector<float>& f, std::vector<uint16_t>* b, std::vector<float>* widened) {
  b->resize(f.size());
  widened->resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &f[i], 4);
    (*b)[i] = static_cast<uint16_t>(u >> 16);
    (*widened)[i] = lp::bf16_to_f32((*b)[i]);
  }
}

struct Case {
  int64_t E, H, I, K, T;
};

TEST(PortableMoe, GroupedMatchesReferenceIncludingTails) {
  const Case cases[] = {{4, 17, 15, 2, 5}, {3, 33, 17, 1, 1}, {5, 16, 31, 5, 9}, {8, 100, 19, 2, 13}, {2, 1, 2, 2, 3}};
  int checked = 0;
  for (const Case& c : cases)
    for (const lp::Activation act : {lp::Activation::kSilu, lp::Activation::kGeluErf, lp::Activation::kGeluTanh})
      for (const bool norm : {false, true})
        for (const bool with_shared : {false, true})
          for (const bool bf16 : {false, true}) {
            SCOPED_TRACE("E=" + std::to_string(c.E) + " H=" + std::to_string(c.H) + " I=" + std::to_string(c.I) + " K=" +
                         std::to_string(c.K) + " T=" + std::to_string(c.T) + " act=" + std::to_string(static_cast<int>(act)) +
                         (norm ? " norm" : "") + (with_shared ? " shared" : "") + (bf16 ? " bf16" : ""));
            const auto x = random_vec(static_cast<size_t>(c.T * c.H), 1);
            const auto router = random_vec(static_cast<size_t>(c.E * c.H), 2, 2.0f);
            const auto gate_up = random_vec(static_cast<size_t>(c.E * 2 * c.I * c.H), 3);
            const auto down = random_vec(static_cast<size_t>(c.E * c.H * c.I), 4);
            const auto shared = random_vec(static_cast<size_t>(c.T * c.H), 5);
            const auto shared_gate = random_vec(static_cast<size_t>(c.H), 6);
            std::vector<uint16_t> r16, gu16, dn16;
            std::vector<float> rw, guw, dnw;
            to_bf16(router, &r16, &rw);
            to_bf16(gate_up, &gu16, &guw);
            to_bf16(down, &dn16, &dnw);
            lp::MoeWeights w;
            w.experts = c.E;
            w.hidden = c.H;
            w.inter = c.I;
            if (bf16) {
              w.router.bf16 = r16.data();
              w.gate_up.bf16 = gu16.data();
              w.down.bf16 = dn16.data();
            } else {
              w.router.f32 = router.data();
              w.gate_up.f32 = gate_up.data();
              w.down.f32 = down.data();
            }
            w.shared_gate = with_shared ? shared_gate.data() : nullptr;
            lp::MoeParams p;
            p.top_k = c.K;
            p.norm_topk_prob = norm;
            p.act = act;
            const float* sh = with_shared ? shared.data() : nullptr;
            std::vector<float> ref(x.size()), simd(x.size()), grouped_ref(x.size());
            lp::moe_reference(x.data(), c.T, w, p, sh, ref.data());
            lp::moe_grouped(lp::simd_kernels(), x.data(), c.T, w, p, sh, simd.data());
            lp::moe_grouped(lp::reference_kernels(), x.data(), c.T, w, p, sh, grouped_ref.data());
            // The vector linear sums in f32, twice in a row (gate_up, then down over
            // intermediates up to ~10× the output, which cancel): f32 rounding of
            // those sums, a little above a single linear's 1e-5 at H = 100.
            EXPECT_LE(max_rel(ref, simd), 5e-5);
            EXPECT_LE(max_rel(ref, grouped_ref), 1e-5);
            if (bf16) {  // the same as f32 experts holding the widened values: bitwise for the reference
              lp::MoeWeights wf = w;
              wf.router = {rw.data(), nullptr};
              wf.gate_up = {guw.data(), nullptr};
              wf.down = {dnw.data(), nullptr};
              std::vector<float> ref32(x.size());
              lp::moe_reference(x.data(), c.T, wf, p, sh, ref32.data());
              EXPECT_EQ(ref, ref32);
            }
            ++checked;
          }
  EXPECT_EQ(checked, 5 * 3 * 2 * 2 * 2);
}

// E = 3, H = 2, I = 1, x = [1, 0]: router logits (2, 1, 0), so top-2 picks
// experts 0 and 1 with softmax weights e²/z and e/z (z = e² + e + 1), or
// e/(e + 1) and 1/(e + 1) renormalised. Expert e: gate row [g_e, 0], up row
// [u_e, 0], down [d_e0; d_e1], so its output is silu(g_e)·u_e·[d_e0, d_e1].
TEST(PortableMoe, ReferenceRoutesWeighsAndGatesAsWorkedOutByHand) {
  const float x[2] = {1, 0};
  const float router[6] = {2, 0, 1, 0, 0, 0};
  const float g[3] = {0.5f, -1.0f, 2.0f}, u[3] = {2.0f, 3.0f, -1.0f};
  const float d[3][2] = {{1.0f, -2.0f}, {0.5f, 4.0f}, {7.0f, 7.0f}};
  std::vector<float> gate_up, down;
  for (int e = 0; e < 3; ++e) {
    gate_up.insert(gate_up.end(), {g[e], 0, u[e], 0});
    down.insert(down.end(), {d[e][0], d[e][1]});
  }
  lp::MoeWeights w;
  w.experts = 3;
  w.hidden = 2;
  w.inter = 1;
  w.router.f32 = router;
  w.gate_up.f32 = gate_up.data();
  w.down.f32 = down.data();
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  auto expert = [&](int e, int o) { return silu(g[e]) * u[e] * d[e][o]; };
  const double e1 = std::exp(1.0), z = e1 * e1 + e1 + 1;
  for (const bool norm : {false, true}) {
    SCOPED_TRACE(norm ? "renormalised" : "softmax weights");
    lp::MoeParams p;
    p.top_k = 2;
    p.norm_topk_prob = norm;
    const double w0 = norm ? e1 / (e1 + 1) : e1 * e1 / z, w1 = norm ? 1 / (e1 + 1) : e1 / z;
    for (const bool grouped : {false, true}) {
      float y[2];
      if (grouped) lp::moe_grouped(lp::simd_kernels(), x, 1, w, p, nullptr, y);
      else lp::moe_reference(x, 1, w, p, nullptr, y);
      for (int o = 0; o < 2; ++o) EXPECT_NEAR(y[o], w0 * expert(0, o) + w1 * expert(1, o), 1e-6) << (grouped ? "grouped" : "reference");
    }
  }
  // A shared expert: + sigmoid(x · shared_gate) · shared.
  const float shared_gate[2] = {-0.75f, 5.0f}, shared[2] = {3.0f, -1.0f};
  w.shared_gate = shared_gate;
  lp::MoeParams one;
  one.top_k = 1;
  one.norm_topk_prob = false;
  const double gate = 1 / (1 + std::exp(0.75)), w0 = e1 * e1 / z;
  for (const bool grouped : {false, true}) {
    float y[2];
    if (grouped) lp::moe_grouped(lp::simd_kernels(), x, 1, w, one, shared, y);
    else lp::moe_reference(x, 1, w, one, shared, y);
    for (int o = 0; o < 2; ++o) EXPECT_NEAR(y[o], w0 * expert(0, o) + gate * shared[o], 1e-6) << (grouped ? "grouped" : "reference");
  }
}

// Equal router logits: the lower expert index wins (loom's rule, both kernels).
TEST(PortableMoe, TiesGoToTheLowerExpert) {
  const float x[2] = {1, 0};
  const float router[6] = {0, 0, 1, 0, 1, 0};  // experts 1 and 2 tie above expert 0
  const std::vector<float> gate_up = {1, 0, 1, 0, /*e1*/ 1, 0, 1, 0, /*e2*/ 1, 0, 1, 0};
  const std::vector<float> down = {1, 1, /*e1*/ 2, 2, /*e2*/ 3, 3};
  lp::MoeWeights w;
  w.experts = 3;
  w.hidden = 2;
  w.inter = 1;
  w.router.f32 = router;
  w.gate_up.f32 = gate_up.data();
  w.down.f32 = down.data();
  lp::MoeParams p;
  p.top_k = 1;
  p.norm_topk_prob = true;  // the single chosen expert weighs 1
  const double h = 1 / (1 + std::exp(-1.0));  // silu(1) · 1
  for (const bool grouped : {false, true}) {
    float y[2];
    if (grouped) lp::moe_grouped(lp::simd_kernels(), x, 1, w, p, nullptr, y);
    else lp::moe_reference(x, 1, w, p, nullptr, y);
    EXPECT_NEAR(y[0], 2 * h, 1e-6) << (grouped ? "grouped" : "reference") << ": expert 1 expected";
  }
}

}  // namespace
