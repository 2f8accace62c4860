// Writer → reader round trips, zero-copy views, and the exact bytes Python's
// safetensors library writes.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "io/io_test_util.h"
#include "loom/io/safetensors.h"
#include "loom/io/safetensors_writer.h"

namespace loom {
namespace {

using testing::TempDir;

Tensor i64_tensor(const std::vector<int64_t>& v, Shape shape) {
  Tensor t = Tensor::empty(DType::kI64, std::move(shape));
  std::memcpy(t.data(), v.data(), v.size() * sizeof(int64_t));
  return t;
}

std::string bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.data()), t.nbytes()); }

NamedTensors sample_tensors() {
  return {
      {"model.layers.0.weight", Tensor::from_f32({1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f}, {2, 3})},
      {"model.norm.weight", Tensor::from_f32({0.5f, 1.0f, -1.5f, 2.0f, 3.0f}, {5}).to(DType::kBF16)},
      {"position_ids", i64_tensor({0, 1, 2, (int64_t{1} << 40)}, {4})},
      {"empty", Tensor::empty(DType::kF32, {0, 4})},
      {"scalar", Tensor::from_f32({42.0f}, {})},
  };
}

void expect_same(const SafetensorsFile& file, const NamedTensors& tensors) {
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    const TensorInfo* info = file.find(name);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->dtype, t.dtype());
    EXPECT_EQ(info->shape, t.shape());
    EXPECT_EQ(info->nbytes(), t.nbytes());
    Tensor v = file.view(*info);
    EXPECT_EQ(v.dtype(), t.dtype());
    EXPECT_EQ(v.shape(), t.shape());
    EXPECT_EQ(bytes(v), bytes(t));
  }
}

TEST(SafetensorsRoundTrip, AsGivenKeepsOrderValuesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const NamedTensors tensors = sample_tensors();
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"origin", "loom test"}};
  ASSERT_TRUE(write_safetensors(path, tensors, metadata).ok());

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  expect_same(**file, tensors);
  EXPECT_EQ((*file)->metadata(), metadata);
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->file_size(), std::filesystem::file_size(path));
  EXPECT_EQ((*file)->header_size() % 8, 0u);
  // kAsGiven lays data out in the caller's order.
  std::vector<std::string> order;
  for (const TensorInfo& t : (*file)->tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"model.layers.0.weight", "model.norm.weight", "position_ids", "empty",
                                             "scalar"}));
  // Values survive, not just bytes: bf16 of these inputs is exact.
  EXPECT_EQ((*file)->get("model.norm.weight")->to_f32_vector(), (std::vector<float>{0.5f, 1.0f, -1.5f, 2.0f, 3.0f}));
  EXPECT_EQ((*file)->get("position_ids")->data_as<int64_t>()[3], int64_t{1} << 40);
  EXPECT_EQ((*file)->get("scalar")->numel(), 1);
  EXPECT_EQ((*file)->get("empty")->numel(), 0);
}

TEST(SafetensorsRoundTrip, NoMetadataMeansNoMetadataKey) {
  TempDir dir;
  const std::string path = dir.file("a.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"x", Tensor::from_f32({1, 2}, {2})}}).ok());
  const std::string raw = testing::read_file(path);
  EXPECT_EQ(raw.find("__metadata__"), std::string::npos);
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->metadata().empty());
}

TEST(SafetensorsRoundTrip, LikePythonSortsByDescendingAlignmentThenName) {
  // safetensors' Dtype enum order is BOOL < U8 < I8 < F16 < BF16 < I32 < F32 <
  // I64 and its writer sorts descending, ties by name.
  const NamedTensors tensors = {
      {"b_bool", Tensor::zeros(DType::kBool, {3})}, {"z_f32", Tensor::zeros(DType::kF32, {2})},
      {"a_bf16", Tensor::zeros(DType::kBF16, {3})}, {"a_f32", Tensor::zeros(DType::kF32, {1})},
      {"c_i64", Tensor::zeros(DType::kI64, {1})},   {"d_u8", Tensor::zeros(DType::kU8, {5})},
      {"e_f16", Tensor::zeros(DType::kF16, {1})},   {"f_i32", Tensor::zeros(DType::kI32, {1})},
      {"g_i8", Tensor::zeros(DType::kI8, {1})},     {"B_f32", Tensor::zeros(DType::kF32, {1})},
  };
  TempDir dir;
  const std::string path = dir.file("p.safetensors");
  ASSERT_TRUE(write_safetensors(path, tensors, {}, SafetensorsOrder::kLikePython).ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<std::string> order;
  for (const TensorInfo& t : (*file)->tensors()) order.push_back(t.name);
  EXPECT_EQ(order, (std::vector<std::string>{"c_i64", "B_f32", "a_f32", "z_f32", "f_i32", "a_bf16", "e_f16", "g_i8",
                                             "d_u8", "b_bool"}));
  // Descending alignment keeps every tensor aligned to its element size.
  for (const TensorInfo& t : (*file)->tensors()) EXPECT_EQ(t.data_begin % dtype_size(t.dtype), 0u) << t.name;
}

TEST(SafetensorsRoundTrip, RewritingInFileOrderIsByteIdentical) {
  TempDir dir;
  const std::string first = dir.file("first.safetensors");
  const std::string second = dir.file("second.safetensors");
  ASSERT_TRUE(write_safetensors(first, sample_tensors(), {{"format", "pt"}}, SafetensorsOrder::kLikePython).ok());
  auto file = SafetensorsFile::open(first);
  ASSERT_TRUE(file.ok());
  NamedTensors again;
  for (const TensorInfo& t : (*file)->tensors()) again.emplace_back(t.name, (*file)->view(t));
  ASSERT_TRUE(write_safetensors(second, again, (*file)->metadata()).ok());
  EXPECT_EQ(testing::read_file(first), testing::read_file(second));
}

TEST(SafetensorsZeroCopy, ViewPointsIntoTheMappingAndKeepsItAlive) {
  TempDir dir;
  const std::string path = dir.file("z.safetensors");
  // Python's order keeps every tensor aligned, so every view can be zero-copy.
  ASSERT_TRUE(write_safetensors(path, sample_tensors(), {}, SafetensorsOrder::kLikePython).ok());
  Tensor kept;
  {
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok());
    const auto* begin = (*file)->data();
    const auto* end = begin + (*file)->data_size();
    for (const TensorInfo& t : (*file)->tensors()) {
      Tensor v = (*file)->view(t);
      const auto* p = static_cast<const uint8_t*>(v.data());
      EXPECT_EQ(p, begin + t.data_begin) << t.name;
      EXPECT_TRUE(p >= begin && p + t.nbytes() <= end) << t.name;
    }
    kept = (*file)->get("model.layers.0.weight").value();
  }
  // The SafetensorsFile is gone; the view still reads the mapped bytes.
  std::filesystem::remove(path);
  EXPECT_EQ(kept.to_f32_vector(), (std::vector<float>{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f}));
}

TEST(SafetensorsZeroCopy, MisalignedDataIsCopiedToAlignedStorage) {
  // A U8 tensor of 2 bytes, then an F32 tensor at data offset 2: legal in the
  // format, but the F32 view would be misaligned.
  const std::vector<float> values = {1.0f, -2.5f};
  const std::string header =
      R"({"u":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"f":{"dtype":"F32","shape":[2],"data_offsets":[2,10]}})";
  std::string padded = header;
  padded.append((8 - padded.size() % 8) % 8, ' ');  // data section starts 8-aligned
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  testing::write_file(path, testing::raw_safetensors(padded, std::string("\x07\x09", 2) + testing::bytes_of(values)));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  Tensor f = (*file)->get("f").value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data()) % alignof(float), 0u);
  EXPECT_EQ(f.to_f32_vector(), values);
  Tensor u = (*file)->get("u").value();
  EXPECT_EQ(u.data(), (*file)->data());  // U8 needs no alignment: still zero-copy
}

TEST(SafetensorsZeroCopy, ViewOfForeignRangeThrows) {
  TempDir dir;
  const std::string path = dir.file("f.safetensors");
  ASSERT_TRUE(write_safetensors(path, {{"x", Tensor::from_f32({1, 2}, {2})}}).ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok());
  TensorInfo bogus{"bogus", DType::kF32, {1000}, 0, 4000};
  EXPECT_THROW((*file)->view(bogus), Error);
  auto missing = (*file)->get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope"), std::string::npos);
}

// Expected bytes below are the ones the safetensors library's own tests
// (safetensors/src/tensor.rs: test_serialization, test_serialization_forced_alignement,
// test_empty) assert for its writer.
TEST(SafetensorsPythonFormat, MatchesLibraryGoldenBytes) {
  const std::vector<float> six = {0, 1, 2, 3, 4, 5};
  {
    auto out = serialize_safetensors({{"attn.0", Tensor::from_f32(six, {1, 2, 3})}});
    ASSERT_TRUE(out.ok());
    const std::string json = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    EXPECT_EQ(*out, testing::le64(64) + json + testing::bytes_of(six));
  }
  {
    auto out = serialize_safetensors({{"attn0", Tensor::from_f32(six, {1, 1, 2, 3})}});
    ASSERT_TRUE(out.ok());
    const std::string json = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
    EXPECT_EQ(*out, testing::le64(72) + json + std::string(7, ' ') + testing::bytes_of(six));
  }
  {
    auto out = serialize_safetensors({});
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, testing::le64(8) + "{}" + std::string(6, ' '));
  }
  {
    auto out = serialize_safetensors({}, {{"framework", "pt"}});
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(*out, testing::le64(40) + R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
  }
}

TEST(SafetensorsPythonFormat, MetadataFirstAndSerdeJsonEscaping) {
  const std::string name = "a\"b\\c\nd\x01\x7f\xc3\xa9/";  // quote, backslash, LF, SOH, DEL, é, slash
  auto out = serialize_safetensors({{name, Tensor::from_f32({1}, {1})}}, {{"k", "v\t"}});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  const std::string header = out->substr(8);
  EXPECT_EQ(header.rfind(R"({"__metadata__":{"k":"v\t"},)", 0), 0u) << header;
  EXPECT_NE(header.find("\"a\\\"b\\\\c\\nd\\u0001\x7f\xc3\xa9/\":{"), std::string::npos) << header;

  TempDir dir;
  const std::string path = dir.file("esc.safetensors");
  testing::write_file(path, *out);
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_NE((*file)->find(name), nullptr);
  EXPECT_EQ((*file)->metadata().at("k"), "v\t");
}

TEST(SafetensorsWriter, ReplacesAtomicallyAndLeavesNoTemporaries) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  testing::write_file(path, "old contents");
  ASSERT_TRUE(write_safetensors(path, {{"x", Tensor::from_f32({3}, {1})}}).ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->get("x")->to_f32_vector(), std::vector<float>{3});
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(SafetensorsWriter, RejectsBadInputWithoutTouchingTheFile) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  struct Case {
    const char* what;
    NamedTensors tensors;
    std::string needle;
  };
  const Case cases[] = {
      {"duplicate", {{"w", Tensor::from_f32({1}, {1})}, {"w", Tensor::from_f32({2}, {1})}}, "duplicate tensor name 'w'"},
      {"undefined", {{"u", Tensor()}}, "'u' is undefined"},
      {"reserved", {{"__metadata__", Tensor::from_f32({1}, {1})}}, "reserved"},
      {"invalid utf-8", {{std::string("bad\xff", 4), Tensor::from_f32({1}, {1})}}, "UTF-8"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Status s = write_safetensors(path, c.tensors);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.message().find(c.needle), std::string::npos) << s.message();
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

TEST(SafetensorsWriter, UnwritableDirectoryIsAnIoErrorNamingThePath) {
  TempDir dir;
  const std::string path = dir.file("no/such/dir/model.safetensors");
  Status s = write_safetensors(path, {{"x", Tensor::from_f32({1}, {1})}});
  EXPECT_EQ(s.code(), ErrorCode::kIoError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
