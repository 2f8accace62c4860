// RoPE: the SIMD rotation against its scalar reference on every compiled target, and both the
// inverse frequencies and one rotation against goldens computed by PyTorch 1.13 (f32) running
// Transformers' own code: the rope initializers of modeling_rope_utils.py and
// LlamaRotaryEmbedding.forward + apply_rotary_pos_emb, transcribed into a script that printed
// these values as hex floats.
#include "loom/runtime/cpu/rope.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace loom::cpu {
namespace {

// Distance in units in the last place between two finite floats of the same sign.
int64_t ulp_distance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - static_cast<int64_t>(ib));
}

// powf differs by an ulp between libm and PyTorch's vectorized pow; everything else in the
// initializers is the same f32 arithmetic, so 2 ulp bounds the difference.
void check_golden(const std::string& name, const RopeParams& p, int64_t head_dim, int64_t seq_len,
                  double attention, const std::vector<float>& want) {
  SCOPED_TRACE(name);
  std::vector<float> got;
  float scaling = 0;
  const Status s = compute_inv_freq(p, head_dim, seq_len, &got, &scaling);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_FLOAT_EQ(scaling, static_cast<float>(attention));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_LE(ulp_distance(got[i], want[i]), 2) << "inv_freq[" << i << "] got " << got[i] << " want " << want[i];
}

TEST(RopeParams, MatchTransformersInitializers) {
  {
    RopeParams p;
    p.theta = 10000;
    check_golden("default_theta1e4_d64", p, 64, 0, 0x1.0000000000000p+0, {
      0x1.000000p+0f, 0x1.7ff222p-1f, 0x1.1feb34p-1f, 0x1.afd136p-2f, 0x1.43d136p-2f, 0x1.e5a846p-3f,
      0x1.6c310ep-3f, 0x1.111aeep-3f, 0x1.99999ap-4f, 0x1.33281ap-4f, 0x1.ccab84p-5f, 0x1.59742ap-5f,
      0x1.030dc6p-5f, 0x1.84869ep-6f, 0x1.235a72p-6f, 0x1.b4f7e4p-7f, 0x1.47ae14p-7f, 0x1.eb7360p-8f,
      0x1.708938p-8f, 0x1.145ceep-8f, 0x1.9e7c70p-9f, 0x1.36d21ap-9f, 0x1.d22a50p-10f, 0x1.5d931cp-10f,
      0x1.0624dep-10f, 0x1.892918p-11f, 0x1.26d42cp-11f, 0x1.ba2e4ap-12f, 0x1.4b96c0p-12f, 0x1.f1502ap-13f,
      0x1.74eea6p-13f, 0x1.17a8e4p-13f});
  }
  {
    RopeParams p;
    p.theta = 10000;
    p.partial_rotary_factor = 0.4;
    check_golden("default_partial04_d80", p, 80, 0, 0x1.0000000000000p+0, {
      0x1.000000p+0f, 0x1.1feb34p-1f, 0x1.43d136p-2f, 0x1.6c310ep-3f, 0x1.99999ap-4f, 0x1.ccab84p-5f,
      0x1.030dc6p-5f, 0x1.235a72p-6f, 0x1.47ae14p-7f, 0x1.708938p-8f, 0x1.9e7c70p-9f, 0x1.d22a50p-10f,
      0x1.0624dep-10f, 0x1.26d42cp-11f, 0x1.4b96c0p-12f, 0x1.74eea6p-13f});
  }
  {
    RopeParams p;
    p.type = "linear";
    p.theta = 10000;
    p.factor = 3;
    check_golden("linear_factor3_d64", p, 64, 0, 0x1.0000000000000p+0, {
      0x1.555556p-2f, 0x1.ffed82p-3f, 0x1.7fe446p-3f, 0x1.1fe0cep-3f, 0x1.afc19ep-4f, 0x1.43c584p-4f,
      0x1.e596bep-5f, 0x1.6c23e8p-5f, 0x1.111112p-5f, 0x1.998acep-6f, 0x1.331d02p-6f, 0x1.cc9ae2p-7f,
      0x1.5967b2p-7f, 0x1.03046ap-7f, 0x1.847898p-8f, 0x1.234feep-8f, 0x1.b4e81ap-9f, 0x1.47a240p-9f,
      0x1.eb61a0p-10f, 0x1.707be8p-10f, 0x1.1452f6p-10f, 0x1.9e6d78p-11f, 0x1.36c6e0p-11f, 0x1.d2197ap-12f,
      0x1.5d867ep-12f, 0x1.061b66p-12f, 0x1.891ae6p-13f, 0x1.26c986p-13f, 0x1.ba1e56p-14f, 0x1.4b8ac6p-14f,
      0x1.f13e32p-15f, 0x1.74e130p-15f});
  }
  {
    RopeParams p;
    p.type = "dynamic";
    p.theta = 10000;
    p.factor = 2;
    p.max_position_embeddings = 2048;
    check_golden("dynamic_factor2_seq5000", p, 64, 5000, 0x1.0000000000000p+0, {
      0x1.000000p+0f, 0x1.6f81b6p-1f, 0x1.07ca94p-1f, 0x1.7ab114p-2f, 0x1.0fd1dep-2f, 0x1.863796p-3f,
      0x1.1817b4p-3f, 0x1.9217e6p-4f, 0x1.209e00p-4f, 0x1.9e54bep-5f, 0x1.2966b4p-5f, 0x1.aaf0ecp-6f,
      0x1.3273dcp-6f, 0x1.b7ef5ep-7f, 0x1.3bc788p-7f, 0x1.c5530ap-8f, 0x1.4563dep-8f, 0x1.d31f0ap-9f,
      0x1.4f4b18p-9f, 0x1.e1568ap-10f, 0x1.597f78p-10f, 0x1.effccap-11f, 0x1.64035cp-11f, 0x1.ff1534p-12f,
      0x1.6ed92ep-12f, 0x1.07519cp-12f, 0x1.7a0368p-13f, 0x1.0f5536p-13f, 0x1.8584a2p-14f, 0x1.179740p-14f,
      0x1.915f80p-15f, 0x1.2019a4p-15f});
  }
  {
    RopeParams p;
    p.type = "llama3";
    p.theta = 500000;
    p.factor = 8;
    p.low_freq_factor = 1;
    p.high_freq_factor = 4;
    p.original_max_position_embeddings = 8192;
    check_golden("llama3_factor8_d128", p, 128, 0, 0x1.0000000000000p+0, {
      0x1.000000p+0f, 0x1.a11582p-1f, 0x1.53c38cp-1f, 0x1.14c708p-1f, 0x1.c2ef78p-2f, 0x1.6f56fap-2f,
      0x1.2b3dc6p-2f, 0x1.e788c2p-3f, 0x1.8d2760p-3f, 0x1.438740p-3f, 0x1.078d40p-3f, 0x1.ad6338p-4f,
      0x1.5dc95ap-4f, 0x1.1cf130p-4f, 0x1.d03ccep-5f, 0x1.7a2d08p-5f, 0x1.341190p-5f, 0x1.f5ea7ep-6f,
      0x1.98de92p-6f, 0x1.4d1272p-6f, 0x1.0f5386p-6f, 0x1.ba0dd8p-7f, 0x1.681adap-7f, 0x1.2558fep-7f,
      0x1.ddee9ep-8f, 0x1.8554ecp-8f, 0x1.3d2804p-8f, 0x1.025c6ap-8f, 0x1.a4ee40p-9f, 0x1.1bfa0cp-9f,
      0x1.67a23ap-10f, 0x1.c12f3cp-11f, 0x1.132ba4p-11f, 0x1.47e210p-12f, 0x1.765ba4p-13f, 0x1.90d10cp-14f,
      0x1.46831ap-14f, 0x1.09fb7ep-14f, 0x1.b15902p-15f, 0x1.610332p-15f, 0x1.1f91f0p-15f, 0x1.d484dep-16f,
      0x1.7da9e8p-16f, 0x1.36e8eap-16f, 0x1.fa8b86p-17f, 0x1.9ca3eap-17f, 0x1.5024d6p-17f, 0x1.11d41ep-17f,
      0x1.be2188p-18f, 0x1.6b6d0ep-18f, 0x1.280d96p-18f, 0x1.e25700p-19f, 0x1.88ec20p-19f, 0x1.4014d2p-19f,
      0x1.04be68p-19f, 0x1.a8d010p-20f, 0x1.5a0f4ep-20f, 0x1.19e800p-20f, 0x1.cb4a9ap-21f, 0x1.76258ep-21f,
      0x1.30c94ep-21f, 0x1.f09184p-22f, 0x1.948360p-22f, 0x1.4985fep-22f});
  }
  {
    RopeParams p;
    p.type = "llama3";
    p.theta = 500000;
    p.factor = 32;
    p.low_freq_factor = 1;
    p.high_freq_factor = 4;
    p.original_max_position_embeddings = 8192;
    check_golden("llama3_factor32_d64", p, 64, 0, 0x1.0000000000000p+0, {
      0x1.000000p+0f, 0x1.53c38cp-1f, 0x1.c2ef78p-2f, 0x1.2b3dc6p-2f, 0x1.8d2760p-3f, 0x1.078d40p-3f,
      0x1.5dc95ap-4f, 0x1.d03ccep-5f, 0x1.341190p-5f, 0x1.98de92p-6f, 0x1.0f5386p-6f, 0x1.681adap-7f,
      0x1.ddee9ep-8f, 0x1.3d2804p-8f, 0x1.a4ee40p-9f, 0x1.524f36p-10f, 0x1.c26c40p-12f, 0x1.9731eep-14f,
      0x1.46831ap-16f, 0x1.b15902p-17f, 0x1.1f91f0p-17f, 0x1.7da9e8p-18f, 0x1.fa8b86p-19f, 0x1.5024d6p-19f,
      0x1.be2188p-20f, 0x1.280d96p-20f, 0x1.88ec20p-21f, 0x1.04be68p-21f, 0x1.5a0f4ep-22f, 0x1.cb4a9ap-23f,
      0x1.30c94ep-23f, 0x1.948360p-24f});
  }
  {
    RopeParams p;
    p.type = "yarn";
    p.theta = 1000000;
    p.factor = 4;
    p.original_max_position_embeddings = 32768;
    p.max_position_embeddings = 131072;
    check_golden("yarn_factor4_d128", p, 128, 0, 0x1.237d37fe5d298p+0, {
      0x1.000000p+0f, 0x1.9c975ap-1f, 0x1.4c7bc0p-1f, 0x1.0beddep-1f, 0x1.afd136p-2f, 0x1.5bf9fep-2f,
      0x1.186a08p-2f, 0x1.c3f06ap-3f, 0x1.6c310ep-3f, 0x1.257b22p-3f, 0x1.d8ffacp-4f, 0x1.7d298cp-4f,
      0x1.33281ap-4f, 0x1.ef0a26p-5f, 0x1.8eec7ep-5f, 0x1.41783ap-5f, 0x1.030dc6p-5f, 0x1.a18350p-6f,
      0x1.507316p-6f, 0x1.0f2010p-6f, 0x1.b4f7e4p-7f, 0x1.6020a4p-7f, 0x1.1bc25ap-7f, 0x1.c9548cp-8f,
      0x1.6046eep-8f, 0x1.0ec710p-8f, 0x1.9f4aa0p-9f, 0x1.3da490p-9f, 0x1.e483bep-10f, 0x1.705780p-10f,
      0x1.17040ep-10f, 0x1.a4fb70p-11f, 0x1.3c1d64p-11f, 0x1.d832d0p-12f, 0x1.5e7a04p-12f, 0x1.02387cp-12f,
      0x1.79277cp-13f, 0x1.107c70p-13f, 0x1.847d34p-14f, 0x1.103a14p-14f, 0x1.74eea6p-15f, 0x1.2c8648p-15f,
      0x1.e459c4p-16f, 0x1.864f6ap-16f, 0x1.3a8748p-16f, 0x1.faeba8p-17f, 0x1.987f7cp-17f, 0x1.492f56p-17f,
      0x1.094564p-17f, 0x1.ab8882p-18f, 0x1.58863ap-18f, 0x1.15a1dap-18f, 0x1.bf749ep-19f, 0x1.68941cp-19f,
      0x1.2291c6p-19f, 0x1.d44e64p-20f, 0x1.796182p-20f, 0x1.301c04p-20f, 0x1.ea20e0p-21f, 0x1.8af756p-21f,
      0x1.3e47c8p-21f, 0x1.007bd8p-21f, 0x1.9d5ef2p-22f, 0x1.4d1c98p-22f});
  }
  {
    RopeParams p;
    p.type = "yarn";
    p.theta = 10000;
    p.factor = 40;
    p.mscale = 0.707;
    p.mscale_all_dim = 1.0;
    p.original_max_position_embeddings = 4096;
    p.max_position_embeddings = 163840;
    check_golden("yarn_mscale_d64", p, 64, 0, 0x1.d792dd14a1051p-1, {
      0x1.000000p+0f, 0x1.7ff222p-1f, 0x1.1feb34p-1f, 0x1.afd136p-2f, 0x1.43d136p-2f, 0x1.e5a846p-3f,
      0x1.6c310ep-3f, 0x1.111aeep-3f, 0x1.99999ap-4f, 0x1.33281ap-4f, 0x1.ccab84p-5f, 0x1.3f8b74p-5f,
      0x1.b86436p-6f, 0x1.2d1b86p-6f, 0x1.97e506p-7f, 0x1.111aeep-7f, 0x1.6872b2p-8f, 0x1.d2e0ccp-9f,
      0x1.26d42cp-9f, 0x1.67459ap-10f, 0x1.9e7c6ep-11f, 0x1.b32624p-12f, 0x1.74eea6p-13f, 0x1.17a8e2p-15f,
      0x1.a36e2ep-16f, 0x1.3a8746p-16f, 0x1.d7b9e0p-17f, 0x1.61bea2p-17f, 0x1.094566p-17f, 0x1.8dd9bap-18f,
      0x1.2a5884p-18f, 0x1.bf749ep-19f});
  }
  {
    RopeParams p;
    p.type = "yarn";
    p.theta = 150000;
    p.factor = 32;
    p.original_max_position_embeddings = 4096;
    p.max_position_embeddings = 131072;
    p.truncate = false;
    check_golden("yarn_untruncated_d64", p, 64, 0, 0x1.58b90bfbe8e7cp+0, {
      0x1.000000p+0f, 0x1.60ca6ap-1f, 0x1.e62d44p-2f, 0x1.4eff54p-2f, 0x1.cda7f4p-3f, 0x1.3e19fap-3f,
      0x1.b65f3ep-4f, 0x1.2e0ec8p-4f, 0x1.a04328p-5f, 0x1.03bbaap-5f, 0x1.3cc8dep-6f, 0x1.7bd928p-7f,
      0x1.bd5080p-8f, 0x1.f9fc28p-9f, 0x1.127006p-9f, 0x1.13eef0p-10f, 0x1.dea878p-12f, 0x1.0f3372p-13f,
      0x1.415b8cp-15f, 0x1.badbf8p-16f, 0x1.312650p-16f, 0x1.a485f4p-17f, 0x1.21c258p-17f, 0x1.8f5056p-18f,
      0x1.132518p-18f, 0x1.7b2c8ep-19f, 0x1.05448ap-19f, 0x1.680cd0p-20f, 0x1.f02e50p-21f, 0x1.55e400p-21f,
      0x1.d727d6p-22f, 0x1.44a5a6p-22f});
  }
}

TEST(RopeParams, DynamicBelowMaxPositionsIsDefault) {
  RopeParams dyn;
  dyn.type = "dynamic";
  dyn.factor = 4;
  dyn.max_position_embeddings = 4096;
  std::vector<float> a, b;
  float sa = 0, sb = 0;
  ASSERT_TRUE(compute_inv_freq(dyn, 128, 1000, &a, &sa).ok());
  ASSERT_TRUE(compute_inv_freq(RopeParams{}, 128, 0, &b, &sb).ok());
  EXPECT_EQ(a, b);
  // Past max_position_embeddings the base grows, so every frequency but the first shrinks.
  ASSERT_TRUE(compute_inv_freq(dyn, 128, 8192, &a, &sa).ok());
  EXPECT_EQ(a[0], 1.0f);
  for (size_t i = 1; i < a.size(); ++i) EXPECT_LT(a[i], b[i]) << i;
}

TEST(RopeParams, BadParametersNameTheField) {
  std::vector<float> inv;
  float s;
  RopeParams p;
  p.type = "longrope";
  p.original_max_position_embeddings = 16;
  p.long_factor = p.short_factor = std::vector<double>(31, 1.0);  // head_dim 64 needs 32
  Status st = compute_inv_freq(p, 64, 0, &inv, &s);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("longrope"), std::string::npos);
  EXPECT_NE(st.message().find("32"), std::string::npos) << st.to_string();
  p.type = "nope";
  st = compute_inv_freq(p, 64, 0, &inv, &s);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  p.type = "linear";
  st = compute_inv_freq(p, 64, 0, &inv, &s);
  EXPECT_NE(st.message().find("factor"), std::string::npos) << st.to_string();
  p = RopeParams{};
  p.type = "llama3";
  p.factor = 8;
  st = compute_inv_freq(p, 64, 0, &inv, &s);
  EXPECT_NE(st.message().find("original_max_position_embeddings"), std::string::npos) << st.to_string();
  p = RopeParams{};
  p.partial_rotary_factor = 0.3;  // int(64 * 0.3) = 19: odd
  st = compute_inv_freq(p, 64, 0, &inv, &s);
  EXPECT_NE(st.message().find("must be even"), std::string::npos) << st.to_string();
  p = RopeParams{};
  p.theta = 0;
  st = compute_inv_freq(p, 64, 0, &inv, &s);
  EXPECT_NE(st.message().find("rope_theta"), std::string::npos) << st.to_string();
}

TEST(Rope, ApplyMatchesTransformersGolden) {
  // 3 tokens × 2 heads × head_dim 10, partial rotary over 6 dims, positions 0, 7, 100000,
  // theta 10000, cos/sin scaled by 1.25; inputs ((i·37) mod 101 − 50) / 32 in row-major order.
  // All 60 outputs, printed by the PyTorch reference: tests/reference/rope_golden.py.
  const std::vector<float> want = {
      -0x1.f4p+0f, -0x1.04p-1f, 0x1.ep-1f, -0x1.9p+0f, -0x1.ep-4f,
      0x1.54p+0f, -0x1.ep-1f, 0x1.cp-3f, 0x1.6p+0f, -0x1.4p-1f,
      0x1.54p-1f, -0x1.d6p+0f, -0x1.9p-2f, 0x1.0ep+0f, -0x1.72p+0f,
      0x0p+0f, 0x1.28p+0f, -0x1.bp-1f, 0x1.4p-2f, 0x1.78p+0f,
      -0x1.48b28p-2f, 0x1.7712e2p-2f, -0x1.b2d298p+0f, -0x1.48ebf8p-1f, 0x1.5c261p+0f,
      -0x1.5a98c6p+0f, 0x1.8p-4f, 0x1.4p+0f, -0x1.8p-1f, 0x1.ap-2f,
      0x1.432866p+1f, -0x1.df9fd8p-2f, 0x1.c1fe9ep-1f, 0x1.364b6p-4f, -0x1.4a64fcp-2f,
      0x1.4d6e56p+0f, -0x1.fp-1f, 0x1.8p-3f, 0x1.58p+0f, -0x1.5p-1f,
      -0x1.526286p-1f, -0x1.42887p+0f, 0x1.228248p-3f, -0x1.fc3a62p-1f, 0x1.042dd2p+1f,
      -0x1.a14118p-2f, 0x1.2p+0f, -0x1.cp-1f, 0x1.2p-2f, 0x1.7p+0f,
      0x1.6d7d5ep-1f, 0x1.0a559ap+0f, 0x1.c0774p+0f, 0x1.260e6cp-2f, -0x1.bbeb3ap-1f,
      -0x1.5ff6bp+0f, 0x1p-4f, 0x1.38p+0f, -0x1.9p-1f, 0x1.8p-2f,
  };
  ASSERT_EQ(want.size(), 60u);
  std::vector<float> x(60);
  for (int i = 0; i < 60; ++i) x[static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101 - 50) / 32.0f;
  const std::vector<int32_t> positions = {0, 7, 100000};
  std::vector<float> inv;
  float unused;
  RopeParams p;
  p.theta = 10000;
  ASSERT_TRUE(compute_inv_freq(p, 6, 0, &inv, &unused).ok());
  ThreadPool pool(2);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    std::vector<float> got = x, ref = x;
    rope_apply(got.data(), 3, 2, 10, 20, positions.data(), inv.data(), 6, 1.25f, pool);
    rope_apply_ref(ref.data(), 3, 2, 10, 20, positions.data(), inv.data(), 6, 1.25f);
    for (size_t i = 0; i < want.size(); ++i) {
      // cos/sin of 100000 radians-scale angles: PyTorch's and libm's agree to an ulp.
      EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << "element " << i;
      EXPECT_NEAR(ref[i], want[i], 1e-6 * (1 + std::fabs(want[i]))) << "ref element " << i;
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Rope, ApplyMatchesReferenceEverywhere) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> pos_dist(0, 200000);
  ThreadPool one(1), two(2);
  struct Shape {
    int64_t rows, heads, head_dim, rotary_dim, pad;
  };
  const Shape shapes[] = {{1, 32, 128, 128, 0},  {5, 8, 64, 64, 0},    {33, 3, 80, 40, 16}, {70, 4, 36, 36, 7},
                          {2, 1, 8, 2, 0},       {9, 2, 256, 64, 512}, {300, 2, 64, 64, 128}, {4, 5, 34, 34, 0},
                          {17, 3, 96, 30, 3}};
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    for (ThreadPool* pool : {&two, &one})
      for (const Shape& s : shapes) {
        SCOPED_TRACE(std::string(hwy::TargetName(target)) + " threads=" + std::to_string(pool->num_threads()) +
                     " rows=" + std::to_string(s.rows) + " heads=" + std::to_string(s.heads) + " d=" +
                     std::to_string(s.head_dim) + " rot=" + std::to_string(s.rotary_dim));
        const int64_t stride = s.heads * s.head_dim + s.pad;
        std::vector<float> x(static_cast<size_t>(s.rows * stride));
        for (float& v : x) v = nd(rng);
        std::vector<int32_t> positions(static_cast<size_t>(s.rows));
        for (auto& p : positions) p = pos_dist(rng);
        RopeParams params;
        params.theta = 500000;
        params.partial_rotary_factor = static_cast<double>(s.rotary_dim) / static_cast<double>(s.head_dim);
        std::vector<float> inv;
        float scaling;
        ASSERT_TRUE(compute_inv_freq(params, s.head_dim, 0, &inv, &scaling).ok());
        ASSERT_EQ(static_cast<int64_t>(inv.size()) * 2, s.rotary_dim);
        std::vector<float> got = x, want = x;
        rope_apply(got.data(), s.rows, s.heads, s.head_dim, stride, positions.data(), inv.data(), s.rotary_dim, 0.9f,
                   *pool);
        rope_apply_ref(want.data(), s.rows, s.heads, s.head_dim, stride, positions.data(), inv.data(), s.rotary_dim,
                       0.9f);
        int bad = 0;
        for (size_t i = 0; i < x.size(); ++i) {
          const int64_t in_row = static_cast<int64_t>(i) % stride;
          const bool rotated = in_row < s.heads * s.head_dim && in_row % s.head_dim < s.rotary_dim;
          // Pass-through dims and row padding stay untouched; rotated ones match the reference.
          const bool ok = rotated ? std::fabs(got[i] - want[i]) <= 1e-6f * (1 + std::fabs(want[i])) : got[i] == x[i];
          if (!ok && bad++ == 0)
            ADD_FAILURE() << "first mismatch at " << i << (rotated ? " (rotated)" : " (untouched)") << ": got "
                          << got[i] << " want " << (rotated ? want[i] : x[i]);
        }
        EXPECT_EQ(bad, 0);
        // The two-step form gives the same result.
        std::vector<float> cos_sin(static_cast<size_t>(s.rows * s.rotary_dim)), two_step = x;
        rope_cos_sin(positions.data(), s.rows, inv.data(), s.rotary_dim, 0.9f, cos_sin.data());
        rope_apply_cos_sin(two_step.data(), s.rows, s.heads, s.head_dim, stride, cos_sin.data(), s.rotary_dim, *pool);
        EXPECT_EQ(two_step, got);
      }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Rope, BadShapesThrow) {
  ThreadPool pool(1);
  std::vector<float> x(64);
  const int32_t pos = 3;
  const std::vector<float> inv(32, 1.0f);
  EXPECT_THROW(rope_apply(x.data(), 1, 1, 64, 64, &pos, inv.data(), 63, 1.0f, pool), Error);   // odd rotary
  EXPECT_THROW(rope_apply(x.data(), 1, 1, 32, 32, &pos, inv.data(), 64, 1.0f, pool), Error);   // rotary > head_dim
  EXPECT_THROW(rope_apply(x.data(), 1, 2, 32, 48, &pos, inv.data(), 32, 1.0f, pool), Error);   // stride too short
}

}  // namespace
}  // namespace loom::cpu
