// loom's reference dequantization of every block type against llama.cpp's own: blocks
// its quantizer made from fixed rows and the floats its to_float gave for them
// (tests/oracles/make_ggml_quant_vectors.py, committed in tests/core/ggml_vectors/).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/quantize.h"
#include "loom/core/quantize_iq_grids.h"

namespace loom {
namespace {

struct Vectors {
  uint32_t ggml_type = 0, rows = 0, per_row = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> values;
};

std::string vectors_path(const std::string& type) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/core/ggml_vectors/" + type + ".bin";
}

Vectors read_vectors(const std::string& type, DType dt) {
  std::ifstream f(vectors_path(type), std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Vectors v;
  if (bytes.size() < 16 || std::memcmp(bytes.data(), "LGQV", 4) != 0) return v;
  std::memcpy(&v.ggml_type, bytes.data() + 4, 4);
  std::memcpy(&v.rows, bytes.data() + 8, 4);
  std::memcpy(&v.per_row, bytes.data() + 12, 4);
  const size_t n = static_cast<size_t>(v.rows) * v.per_row;
  const size_t block_bytes = dtype_bytes(dt, static_cast<int64_t>(n));
  if (bytes.size() != 16 + block_bytes + 4 * n) return Vectors{};
  v.blocks.assign(bytes.begin() + 16, bytes.begin() + 16 + static_cast<ptrdiff_t>(block_bytes));
  v.values.resize(n);
  std::memcpy(v.values.data(), bytes.data() + 16 + block_bytes, 4 * n);
  return v;
}

struct Case {
  const char* name;
  DType dtype;
  uint32_t ggml_type;  // ggml.h's enum ggml_type
};
constexpr Case kCases[] = {
    {"Q4_1", DType::kQ4_1, 3},       {"Q5_0", DType::kQ5_0, 6},       {"Q5_1", DType::kQ5_1, 7},
    {"Q2_K", DType::kQ2_K, 10},      {"Q3_K", DType::kQ3_K, 11},      {"IQ2_XXS", DType::kIQ2_XXS, 16},
    {"IQ2_XS", DType::kIQ2_XS, 17},  {"IQ3_XXS", DType::kIQ3_XXS, 18}, {"IQ1_S", DType::kIQ1_S, 19},
    {"IQ4_NL", DType::kIQ4_NL, 20},  {"IQ3_S", DType::kIQ3_S, 21},    {"IQ2_S", DType::kIQ2_S, 22},
    {"IQ4_XS", DType::kIQ4_XS, 23},  {"IQ1_M", DType::kIQ1_M, 29},    {"TQ1_0", DType::kTQ1_0, 34},
    {"TQ2_0", DType::kTQ2_0, 35},    {"MXFP4", DType::kMXFP4, 39},
};

TEST(GgmlVectors, DequantizationEqualsLlamaCppBitForBit) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    EXPECT_EQ(dtype_name(c.dtype), c.name);
    const Vectors v = read_vectors(c.name, c.dtype);
    ASSERT_EQ(v.ggml_type, c.ggml_type) << "missing or malformed " << vectors_path(c.name);
    std::vector<float> y(v.values.size());
    dequantize_row_ref(c.dtype, v.blocks.data(), y.data(), static_cast<int64_t>(y.size()));
    int mismatches = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      uint32_t ours, theirs;
      std::memcpy(&ours, &y[i], 4);
      std::memcpy(&theirs, &v.values[i], 4);
      if (ours != theirs && ++mismatches <= 5) {
        ADD_FAILURE() << "element " << i << ": loom " << y[i] << ", llama.cpp " << v.values[i];
      }
    }
    EXPECT_EQ(mismatches, 0);
    // The vectors must exercise the format: some values nonzero, not all equal.
    float lo = v.values[0], hi = v.values[0];
    for (float x : v.values) lo = std::min(lo, x), hi = std::max(hi, x);
    EXPECT_LT(lo, hi);
  }
}

// loom's quantizers of the 32-element types against llama.cpp's, byte for byte.
TEST(GgmlVectors, QuantizationEqualsLlamaCppByteForByte) {
  for (const Case& c : kCases) {
    const std::string name = c.name;
    if (name != "Q4_1" && name != "Q5_0" && name != "Q5_1" && name != "IQ4_NL" && name != "MXFP4") continue;
    SCOPED_TRACE(name);
    std::ifstream f(std::string(LOOM_SOURCE_DIR) + "/tests/core/ggml_vectors/quantize_" + name + ".bin", std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_GE(bytes.size(), 16u);
    ASSERT_EQ(std::memcmp(bytes.data(), "LGQQ", 4), 0);
    uint32_t type, rows, per_row;
    std::memcpy(&type, bytes.data() + 4, 4);
    std::memcpy(&rows, bytes.data() + 8, 4);
    std::memcpy(&per_row, bytes.data() + 12, 4);
    ASSERT_EQ(type, c.ggml_type);
    const size_t n = static_cast<size_t>(rows) * per_row, nbytes = dtype_bytes(c.dtype, static_cast<int64_t>(n));
    ASSERT_EQ(bytes.size(), 16 + 4 * n + nbytes);
    std::vector<float> x(n);
    std::memcpy(x.data(), bytes.data() + 16, 4 * n);
    std::vector<uint8_t> ours(nbytes);
    quantize_row_ref(c.dtype, x.data(), ours.data(), static_cast<int64_t>(n));
    const size_t block = dtype_block_bytes(c.dtype);
    int mismatches = 0;
    for (size_t b = 0; b < nbytes / block; ++b) {
      if (std::memcmp(ours.data() + b * block, bytes.data() + 16 + 4 * n + b * block, block) != 0 && ++mismatches <= 3) {
        ADD_FAILURE() << "block " << b << " differs";
      }
    }
    EXPECT_EQ(mismatches, 0);
  }
}

// The sign bytes: 7 stored bits and an even count of set bits (ksigns_iq2xs).
TEST(GgmlVectors, IqSignBytesHaveEvenParity) {
  for (uint32_t s = 0; s < 128; ++s) {
    const uint8_t b = iq_sign_byte(s);
    EXPECT_EQ(b & 127, static_cast<int>(s));
    EXPECT_EQ(__builtin_popcount(b) % 2, 0) << s;
  }
}

// The grids' values are the published sets: IQ2 magnitudes 8, 25, 43; IQ3_XXS odd
// 4..62, IQ3_S odd 1..15; IQ1 −1, 0, 1; no two rows of a grid alike.
TEST(GgmlVectors, GridsHoldTheirFormatsValues) {
  auto distinct = [](const auto& grid) {
    std::vector<std::vector<int>> rows;
    for (const auto& r : grid) rows.emplace_back(std::begin(r), std::end(r));
    std::sort(rows.begin(), rows.end());
    return std::adjacent_find(rows.begin(), rows.end()) == rows.end();
  };
  for (const auto& r : iq2s_grid) {
    for (uint8_t v : r) EXPECT_TRUE(v == 8 || v == 25 || v == 43);
  }
  for (const auto& r : iq1s_grid) {
    for (int8_t v : r) EXPECT_TRUE(v >= -1 && v <= 1);
  }
  for (const auto& r : iq3s_grid) {
    for (uint8_t v : r) EXPECT_TRUE(v % 2 == 1 && v <= 15);
  }
  EXPECT_TRUE(distinct(iq2xxs_grid));
  EXPECT_TRUE(distinct(iq2xs_grid));
  EXPECT_TRUE(distinct(iq2s_grid));
  EXPECT_TRUE(distinct(iq3xxs_grid));
  EXPECT_TRUE(distinct(iq3s_grid));
  EXPECT_TRUE(distinct(iq1s_grid));
}

}  // namespace
}  // namespace loom
