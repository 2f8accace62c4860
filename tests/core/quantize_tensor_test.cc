// Quantized types at the tensor level: Tensor::to quantizes and dequantizes whole
// tensors in chunks on the pool's threads with the same bytes as row by row, rows
// slice by whole block rows, bf16 sources convert through f32, and requantizing or
// a row that is not whole blocks is refused by name.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "loom/core/quantize.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"

namespace loom {
namespace {

TEST(QuantizeTensor, WholeTensorEqualsRowByRowAndSlicesByBlockRows) {
  const int64_t rows = 96, cols = 512;  // 96 · 2 blocks of 256: several chunks of blocks
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  const Tensor f = Tensor::from_f32(v, {rows, cols});
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    const Tensor q = f.to(t);
    ASSERT_EQ(q.nbytes(), dtype_bytes(t, rows * cols)) << dtype_name(t);
    const size_t row_bytes = dtype_bytes(t, cols);
    std::vector<uint8_t> row(row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row_ref(t, v.data() + r * cols, row.data(), cols);
      ASSERT_EQ(std::memcmp(row.data(), static_cast<const uint8_t*>(q.data()) + r * row_bytes, row_bytes), 0)
          << dtype_name(t) << " row " << r;
    }
    EXPECT_EQ(q.slice_rows(5, 6).data(), static_cast<const uint8_t*>(q.data()) + 5 * row_bytes);
    const std::vector<float> back = q.to_f32_vector();
    std::vector<float> want(static_cast<size_t>(cols));
    dequantize_row_ref(t, static_cast<const uint8_t*>(q.data()) + 7 * row_bytes, want.data(), cols);
    for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(back[static_cast<size_t>(7 * cols + c)], want[static_cast<size_t>(c)]);
  }
}

TEST(QuantizeTensor, Bf16ThroughF32AndRefusals) {
  std::vector<float> v(2 * 256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.1f * static_cast<float>(i));
  const Tensor b = Tensor::from_f32(v, {2, 256}).to(DType::kBF16);
  const Tensor q = b.to(DType::kQ8_0);
  const Tensor q_from_f32 = b.to(DType::kF32).to(DType::kQ8_0);
  EXPECT_EQ(std::memcmp(q.data(), q_from_f32.data(), q.nbytes()), 0) << "bf16 widens exactly before quantizing";
  EXPECT_EQ(q.to(DType::kBF16).dtype(), DType::kBF16);
  EXPECT_THROW(q.to(DType::kQ4_0), Error);  // requantizing
  try {
    Tensor::from_f32(std::vector<float>(100), {1, 100}).to(DType::kQ4_K);
    ADD_FAILURE() << "100 elements are not whole Q4_K blocks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
}

// Large tensors convert on every thread, row by row: the bytes are those of one
// convert_elements over the whole tensor, for each block type and for floats.
TEST(QuantizeTensor, ParallelConversionOfLargeTensorsEqualsOneSerialPass) {
  const int64_t rows = 300, cols = 1024;  // 307200 elements: past the parallel threshold
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(static_cast<float>(i) * 0.013f) * (1.0f + static_cast<float>(i % 97));
  const Tensor src = Tensor::from_f32(v, {rows, cols});
  for (DType dt : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kBF16, DType::kF16}) {
    const Tensor got = src.to(dt);
    std::vector<uint8_t> serial(got.nbytes());
    convert_elements(src.data(), DType::kF32, serial.data(), dt, v.size());
    EXPECT_EQ(std::memcmp(got.data(), serial.data(), serial.size()), 0) << dtype_name(dt);
  }
}

}  // namespace
}  // namespace loom
