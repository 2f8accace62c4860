// GGUF block formats: dequantization of hand-built blocks against the format's
// formula worked out here, quantize → dequantize error per type (ordered as the
// bits per weight are), exact round trips on a type's grid, and named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "loom/core/quantize.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {
namespace {

TEST(Quantize, Q8_0BlockIsScaleTimesInt) {
  BlockQ8_0 b;
  b.d = f32_to_f16(0.25f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 7 - 100);
  float y[32];
  dequantize_row(DType::kQ8_0, &b, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * static_cast<float>(j * 7 - 100)) << j;
}

TEST(Quantize, Q4_0NibblesAreOffsetByEight) {
  BlockQ4_0 b;
  b.d = f32_to_f16(-0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>((j & 0xF) | ((15 - j) << 4));
  float y[32];
  dequantize_row(DType::kQ4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], -0.5f * static_cast<float>(j - 8)) << j;             // low nibble → element j
    EXPECT_EQ(y[j + 16], -0.5f * static_cast<float>(15 - j - 8)) << j;   // high nibble → element j + 16
  }
}

// The 12 scale bytes hold eight 6-bit scales and mins: sub-blocks 0-3 in the low
// six bits of bytes 0-3 (scales) and 4-7 (mins); 4-7 in bytes 8-11's nibbles,
// their top two bits in the top bits of bytes 0-7.
TEST(Quantize, Q4_KDecodesSixBitScalesAndMins) {
  const uint8_t sc[8] = {1, 2, 63, 10, 33, 17, 48, 5}, mn[8] = {3, 0, 7, 62, 20, 41, 9, 63};
  BlockQ4_K b;
  std::memset(&b, 0, sizeof b);
  for (int j = 0; j < 4; ++j) {
    b.scales[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    b.scales[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    b.scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
  b.d = f32_to_f16(0.125f);
  b.dmin = f32_to_f16(0.0625f);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i * 5) & 0xFF);
  float y[256];
  dequantize_row(DType::kQ4_K, &b, y, 256);
  for (int e = 0; e < 256; ++e) {
    const int sub = e / 32;                  // sub-block of 32
    const int chunk = e / 64, pos = e % 32;  // 64 elements share 32 bytes: low nibbles, then high
    const uint8_t byte = b.qs[chunk * 32 + pos];
    const int q = (e % 64) < 32 ? (byte & 0xF) : (byte >> 4);
    const float want = 0.125f * sc[sub] * static_cast<float>(q) - 0.0625f * mn[sub];
    ASSERT_EQ(y[e], want) << "element " << e;
  }
}

TEST(Quantize, Q6_KDecodesLowAndHighBits) {
  BlockQ6_K b;
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 37 + 11);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 53 + 7);
  for (int i = 0; i < 16; ++i) b.scales[i] = static_cast<int8_t>(i * 9 - 70);
  b.d = f32_to_f16(0.01f);
  float y[256];
  dequantize_row(DType::kQ6_K, &b, y, 256);
  const float d = f16_to_f32(b.d);
  for (int e = 0; e < 256; ++e) {
    // Element e: half h of 128, quarter r (32 each) inside it, position l.
    const int h = e / 128, r = (e % 128) / 32, l = e % 32;
    const uint8_t low = b.ql[h * 64 + (r % 2) * 32 + l];
    const int lo = r < 2 ? (low & 0xF) : (low >> 4);
    const int hi = (b.qh[h * 32 + l] >> (2 * r)) & 3;
    const int q = (lo | (hi << 4)) - 32;
    const float want = d * b.scales[e / 16] * static_cast<float>(q);
    ASSERT_EQ(y[e], want) << "element " << e;
  }
}

double nmse_of(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> blocks(dtype_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row(t, x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, blocks.data(), y.data(), static_cast<int64_t>(x.size()));
  double err = 0, energy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (y[i] - x[i]) * static_cast<double>(y[i] - x[i]);
    energy += static_cast<double>(x[i]) * x[i];
  }
  return err / energy;
}

TEST(Quantize, ErrorFollowsBitsPerWeight) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(256 * 64);
  for (float& v : x) v = normal(rng);
  const DType order[] = {DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_0};
  // llama.cpp's types on Gaussian data land near these (rms error² / variance).
  const double bound[] = {1.2e-2, 1.0e-2, 2.6e-3, 7.0e-4, 5.0e-5};
  double previous = 1;
  for (int i = 0; i < 5; ++i) {
    const double e = nmse_of(order[i], x);
    std::printf("%-5s NMSE %.3g (%.2f bits per weight)\n", std::string(dtype_name(order[i])).c_str(), e,
                8.0 * static_cast<double>(dtype_block_bytes(order[i])) / static_cast<double>(dtype_block_elements(order[i])));
    EXPECT_LT(e, bound[i]) << dtype_name(order[i]);
    EXPECT_LT(e, previous) << dtype_name(order[i]) << " should be more precise than the type before it";
    previous = e;
  }
}

TEST(Quantize, GridValuesRoundTripExactlyInQ8_0) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>((i * 37) % 255 - 127) * (i < 32 ? 0.5f : 0.25f);
  x[5] = 127 * 0.5f;  // each block's largest magnitude sets its scale to an exact f16
  x[40] = -127 * 0.25f;
  std::vector<uint8_t> blocks(dtype_bytes(DType::kQ8_0, 64));
  quantize_row(DType::kQ8_0, x.data(), blocks.data(), 64);
  std::vector<float> y(64);
  dequantize_row(DType::kQ8_0, blocks.data(), y.data(), 64);
  EXPECT_EQ(y, x);
}

TEST(Quantize, ZeroAndConstantRows) {
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    std::vector<float> zero(256, 0.0f), y(256, 1.0f);
    std::vector<uint8_t> blocks(dtype_bytes(t, 256));
    quantize_row(t, zero.data(), blocks.data(), 256);
    dequantize_row(t, blocks.data(), y.data(), 256);
    EXPECT_EQ(y, zero) << dtype_name(t);
    std::vector<float> c(256, 0.75f);
    quantize_row(t, c.data(), blocks.data(), 256);
    dequantize_row(t, blocks.data(), y.data(), 256);
    for (float v : y) ASSERT_NEAR(v, 0.75f, 0.75f * 0.08f) << dtype_name(t);
  }
}

TEST(Quantize, TensorConversionAndErrors) {
  std::vector<float> v(2 * 256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.1f * static_cast<float>(i));
  const Tensor f = Tensor::from_f32(v, {2, 256});
  const Tensor q = f.to(DType::kQ6_K);
  EXPECT_EQ(q.nbytes(), 2u * 210u);
  EXPECT_EQ(q.slice_rows(1, 2).data(), static_cast<const uint8_t*>(q.data()) + 210);
  const std::vector<float> back = q.to_f32_vector();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(back[i], v[i], 0.02) << i;
  // bf16 in, quantized out, then bf16 out again.
  const Tensor b = f.to(DType::kBF16).to(DType::kQ8_0).to(DType::kBF16);
  EXPECT_EQ(b.dtype(), DType::kBF16);
  std::vector<float> row(100);
  std::vector<uint8_t> blocks(1024);
  try {
    quantize_row(DType::kQ4_K, row.data(), blocks.data(), 100);
    ADD_FAILURE() << "100 elements are not whole Q4_K blocks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  EXPECT_THROW(q.to(DType::kQ4_0), Error);  // requantizing is refused
}

}  // namespace
}  // namespace loom
