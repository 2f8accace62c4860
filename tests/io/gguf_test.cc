// GGUF: loom's writer and reader agree on every metadata type and tensor dtype;
// files built byte by byte read as the spec says; every malformed file gets its
// own named error (code, file, key or tensor) and no crash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "io/gguf_test_util.h"
#include "io/io_test_util.h"
#include "loom/io/gguf.h"
#include "loom/io/gguf_writer.h"

namespace loom {
namespace {

using io::GgufFile;
using io::GgufValue;
using io::GgufValueType;
using testing::GgufBytes;

GgufValue scalar(GgufValueType t, std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<GgufValue>> v) {
  GgufValue out;
  out.type = t;
  out.value = std::move(v);
  return out;
}

// Every value type, the limits of each width, and arrays nested three deep.
io::GgufMetadata every_value_type() {
  using T = GgufValueType;
  io::GgufMetadata m;
  m.emplace_back("u8", scalar(T::kU8, uint64_t{255}));
  m.emplace_back("i8", scalar(T::kI8, int64_t{-128}));
  m.emplace_back("u16", scalar(T::kU16, uint64_t{65535}));
  m.emplace_back("i16", scalar(T::kI16, int64_t{-32768}));
  m.emplace_back("u32", GgufValue::u32(4294967295u));
  m.emplace_back("i32", GgufValue::i32(std::numeric_limits<int32_t>::min()));
  m.emplace_back("f32", GgufValue::f32(-1.5e-7f));
  m.emplace_back("bool.true", GgufValue::boolean(true));
  m.emplace_back("bool.false", GgufValue::boolean(false));
  m.emplace_back("string", GgufValue::string(std::string("naïve \0 bytes", 14)));
  m.emplace_back("string.empty", GgufValue::string(""));
  m.emplace_back("u64", GgufValue::u64(~uint64_t{0}));
  m.emplace_back("i64", scalar(T::kI64, std::numeric_limits<int64_t>::min()));
  m.emplace_back("f64", scalar(T::kF64, 3.141592653589793));
  m.emplace_back("array.strings", GgufValue::strings({"<s>", "</s>", "", "▁the"}));
  m.emplace_back("array.f32", GgufValue::f32s({0.0f, -2.25f, 1e30f}));
  m.emplace_back("array.i32", GgufValue::i32s({-1, 0, 7}));
  m.emplace_back("array.empty_u64", GgufValue::array_of(T::kU64, {}));
  m.emplace_back("array.bool", GgufValue::array_of(T::kBool, {GgufValue::boolean(true), GgufValue::boolean(false)}));
  m.emplace_back("array.nested",
                 GgufValue::array_of(T::kArray, {GgufValue::i32s({1, 2}), GgufValue::array_of(T::kI32, {}),
                                                 GgufValue::array_of(T::kArray, {GgufValue::strings({"deep"})})}));
  return m;
}

// Tensors of every dtype GGUF maps, filled with random bytes (a block's bytes
// need not be a sensible quantization to be moved unchanged).
io::GgufTensors every_dtype(std::mt19937& rng) {
  auto filled = [&](DType dt, Shape shape) {
    Tensor t = Tensor::empty(dt, std::move(shape));
    auto* p = t.data_as<uint8_t>();
    for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng());
    return t;
  };
  io::GgufTensors ts;
  ts.emplace_back("f32.matrix", filled(DType::kF32, {3, 5}));
  ts.emplace_back("f16.vector", filled(DType::kF16, {7}));
  ts.emplace_back("bf16.4d", filled(DType::kBF16, {2, 3, 1, 4}));
  ts.emplace_back("q8_0", filled(DType::kQ8_0, {3, 64}));
  ts.emplace_back("q4_0", filled(DType::kQ4_0, {5, 32}));
  ts.emplace_back("q4_k", filled(DType::kQ4_K, {2, 512}));
  ts.emplace_back("q5_k", filled(DType::kQ5_K, {1, 256}));
  ts.emplace_back("q6_k", filled(DType::kQ6_K, {3, 256}));
  ts.emplace_back("i8", filled(DType::kI8, {9}));
  ts.emplace_back("i32", filled(DType::kI32, {2, 2}));
  ts.emplace_back("i64", filled(DType::kI64, {3}));
  return ts;
}

std::string bytes_of(const Tensor& t) { return std::string(static_cast<const char*>(t.data()), t.nbytes()); }

// Opening the file opened last again reuses its parse; a file rewritten in
// place (same size, so possibly the same stamp within the clock's tick) is
// parsed anew, and so is a file replaced by another of the same header.
TEST(Gguf, ReopeningReusesTheParseUntilTheFileChanges) {
  testing::TempDir dir;
  const std::string path = dir.file("reopen.gguf");
  io::GgufMetadata meta;
  meta.emplace_back("general.name", GgufValue::string("first"));
  ASSERT_TRUE(io::write_gguf(path, meta, {}).ok());
  auto a = GgufFile::open(path);
  auto b = GgufFile::open(path);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->get(), b->get());

  meta[0].second = GgufValue::string("other");  // same length: same file size
  ASSERT_TRUE(io::write_gguf(path, meta, {}).ok());
  auto c = GgufFile::open(path);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_NE(c->get(), a->get());
  EXPECT_TRUE(*(*c)->find_value("general.name") == GgufValue::string("other"));

  std::string bytes = testing::read_file(path);
  bytes[0] = 'X';  // bad magic, in place
  testing::write_file(path, bytes);
  EXPECT_FALSE(GgufFile::open(path).ok());
}

TEST(Gguf, EveryMetadataTypeRoundTrips) {
  testing::TempDir dir;
  const std::string path = dir.file("meta.gguf");
  const io::GgufMetadata meta = every_value_type();
  ASSERT_TRUE(io::write_gguf(path, meta, {}).ok());
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->version(), 3u);
  EXPECT_EQ((*file)->alignment(), 32u);
  ASSERT_EQ((*file)->metadata().size(), meta.size());
  for (size_t i = 0; i < meta.size(); ++i) {
    EXPECT_EQ((*file)->metadata()[i].first, meta[i].first);  // file order kept
    EXPECT_TRUE((*file)->metadata()[i].second == meta[i].second) << meta[i].first;
  }
  const GgufValue* empty = (*file)->find_value("array.empty_u64");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->element_type, GgufValueType::kU64);
  EXPECT_TRUE(empty->array().empty());
  const auto& nested = (*file)->find_value("array.nested")->array();
  ASSERT_EQ(nested.size(), 3u);
  EXPECT_EQ((nested[2].array()[0].array()[0].as_string("x")).value(), "deep");
  EXPECT_EQ(((*file)->find_value("i8")->as_int("i8")).value(), -128);
  EXPECT_EQ(((*file)->find_value("u64")->as_uint("u64")).value(), ~uint64_t{0});
  EXPECT_FLOAT_EQ(static_cast<float>((*file)->find_value("f32")->as_double("f32").value()), -1.5e-7f);
  EXPECT_EQ(((*file)->find_value("bool.true")->as_bool("b")).value(), true);
}

TEST(Gguf, AccessorsNameTheValueAndItsType) {
  const GgufValue s = GgufValue::string("x");
  auto as_int = s.as_int("llama.block_count");
  ASSERT_FALSE(as_int.ok());
  EXPECT_EQ(as_int.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(as_int.status().message().find("llama.block_count"), std::string::npos);
  EXPECT_NE(as_int.status().message().find("string"), std::string::npos);
  auto neg = GgufValue::i32(-3).as_uint("n");
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("negative"), std::string::npos);
  auto too_big = GgufValue::u64(~uint64_t{0}).as_int("n");
  EXPECT_FALSE(too_big.ok());
  EXPECT_FALSE(GgufValue::boolean(true).as_int("b").ok());  // bool is not an integer
  EXPECT_EQ((GgufValue::u32(7).as_double("d")).value(), 7.0);
  EXPECT_TRUE(GgufValue::u32(7).array().empty());
  EXPECT_FALSE(GgufValue::f32s({1.0f}).as_string("arr").ok());
}

TEST(Gguf, EveryDtypeRoundTripsByteForByte) {
  for (uint64_t alignment : {32u, 64u, 8u}) {
    testing::TempDir dir;
    std::mt19937 rng(1234);
    const std::string path = dir.file("tensors.gguf");
    const io::GgufTensors ts = every_dtype(rng);
    io::GgufMetadata meta = {{"general.architecture", GgufValue::string("llama")}};
    ASSERT_TRUE(io::write_gguf(path, meta, ts, alignment).ok()) << alignment;
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    EXPECT_EQ((*file)->alignment(), alignment);
    EXPECT_EQ((*file)->data_offset() % alignment, 0u);
    EXPECT_EQ(((*file)->architecture()).value(), "llama");
    // general.alignment is added only where it differs from the default.
    EXPECT_EQ((*file)->find_value("general.alignment") != nullptr, alignment != 32);
    ASSERT_EQ((*file)->tensors().size(), ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
      const io::GgufTensorInfo& info = (*file)->tensors()[i];
      const Tensor& want = ts[i].second;
      EXPECT_EQ(info.name, ts[i].first);
      EXPECT_EQ(info.dtype, want.dtype()) << info.name;
      EXPECT_EQ(info.ggml_type, *io::ggml_type_from_dtype(want.dtype()));
      EXPECT_EQ(info.shape, want.shape()) << info.name;
      EXPECT_EQ(info.nbytes, want.nbytes()) << info.name;
      EXPECT_EQ(info.offset % alignment, 0u) << info.name;
      Tensor got = ((*file)->get(info.name)).value();
      EXPECT_EQ(got.dtype(), want.dtype());
      EXPECT_EQ(got.shape(), want.shape());
      EXPECT_EQ(reinterpret_cast<uintptr_t>(got.data()) % alignment, 0u) << info.name;
      EXPECT_EQ(bytes_of(got), bytes_of(want)) << info.name;
    }
  }
}

// A file written in place (each tensor's bytes filled through the mapping) has
// write_gguf's bytes; dropped before commit() it leaves nothing; rejected specs are
// write_gguf's errors.
TEST(Gguf, WrittenInPlaceEqualsWrittenWhole) {
  for (uint64_t alignment : {32u, 64u}) {
    testing::TempDir dir;
    std::mt19937 rng(99);
    const io::GgufTensors ts = every_dtype(rng);
    const io::GgufMetadata meta = {{"general.architecture", GgufValue::string("llama")}};
    ASSERT_TRUE(io::write_gguf(dir.file("whole.gguf"), meta, ts, alignment).ok());
    std::vector<io::GgufTensorSpec> specs;
    for (const auto& [name, t] : ts) specs.push_back({name, t.dtype(), t.shape()});
    {
      auto dropped = io::GgufInPlaceWriter::create(dir.file("dropped.gguf"), meta, specs, alignment);
      ASSERT_TRUE(dropped.ok()) << dropped.status().to_string();
    }
    auto w = io::GgufInPlaceWriter::create(dir.file("in_place.gguf"), meta, specs, alignment);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    for (size_t i = 0; i < ts.size(); ++i) std::memcpy(w->data(i), ts[i].second.data(), ts[i].second.nbytes());
    ASSERT_TRUE(w->commit().ok());
    EXPECT_FALSE(w->commit().ok());  // once
    EXPECT_EQ(testing::read_file(dir.file("in_place.gguf")), testing::read_file(dir.file("whole.gguf"))) << alignment;
    size_t files = 0;
    for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path())) ++files;
    EXPECT_EQ(files, 2u);  // whole.gguf and in_place.gguf: no temporary, nothing of the dropped one
  }
  testing::TempDir dir;
  auto bad = io::GgufInPlaceWriter::create(dir.file("bad.gguf"), {}, {{"q", DType::kQ4_K, {2, 128}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("multiple of the Q4_K block"), std::string::npos) << bad.status().message();
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

TEST(Gguf, ViewsOutliveTheFileObject) {
  testing::TempDir dir;
  const std::string path = dir.file("v.gguf");
  ASSERT_TRUE(io::write_gguf(path, {}, {{"w", Tensor::from_f32({1, 2, 3, 4}, {2, 2})}}).ok());
  Tensor view;
  {
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok());
    view = ((*file)->get("w")).value();
  }
  EXPECT_EQ(view.to_f32_vector(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Gguf, ScalarIsWrittenAsOneElement) {
  testing::TempDir dir;
  const std::string path = dir.file("s.gguf");
  ASSERT_TRUE(io::write_gguf(path, {}, {{"scale", Tensor::from_f32({2.5f}, {})}}).ok());
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->tensors()[0].shape, (Shape{1}));
  EXPECT_EQ((*file)->get("scale").value().to_f32_vector(), std::vector<float>{2.5f});
}

TEST(Gguf, ReadsAVersion2FileBuiltByHand) {
  // ne = {3, 2}: two rows of three, loom shape [2, 3]; one uint32 key; data 32-aligned.
  GgufBytes b;
  b.header(2, 1, 1).kv_u32("llama.block_count", 7).tensor("w", {3, 2}, 0, 0).pad_to(32);
  const size_t data_at = b.size();
  for (float f : {1.f, 2.f, 3.f, 4.f, 5.f, 6.f}) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    b.u32(bits);
  }
  testing::TempDir dir;
  const std::string path = dir.file("v2.gguf");
  testing::write_file(path, b.bytes());
  auto file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->version(), 2u);
  EXPECT_EQ((*file)->data_offset(), data_at);
  EXPECT_EQ(((*file)->require_value("llama.block_count").value()->as_int("n")).value(), 7);
  Tensor w = ((*file)->get("w")).value();
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  EXPECT_EQ(w.to_f32_vector(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto missing = (*file)->require_value("general.architecture");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
  EXPECT_EQ((*file)->architecture().status().code(), ErrorCode::kNotFound);
  EXPECT_EQ((*file)->get("nope").status().code(), ErrorCode::kNotFound);
}

TEST(Gguf, AlignmentOneGivesMisalignedDataACopy) {
  // general.alignment 1: the data starts right after the tensor infos, at byte 90,
  // not a multiple of 4, so the F32 view cannot point into the mapping.
  GgufBytes b;
  b.header(3, 1, 1).kv_u32("general.alignment", 1).tensor("w", {2}, 0, 0);
  ASSERT_EQ(b.size(), 90u);
  for (float f : {1.5f, -2.f}) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    b.u32(bits);
  }
  testing::TempDir dir;
  testing::write_file(dir.file("a1.gguf"), b.bytes());
  auto file = GgufFile::open(dir.file("a1.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->alignment(), 1u);
  EXPECT_EQ((*file)->data_offset(), 90u);
  Tensor w = (*file)->get("w").value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % 4, 0u);
  EXPECT_EQ(w.to_f32_vector(), (std::vector<float>{1.5f, -2.f}));
}

TEST(Gguf, ArraysNestedEightDeepAreRead) {
  GgufBytes b;
  b.header(3, 0, 1).str("deep");
  b.u32(9);
  for (int i = 0; i < 7; ++i) b.u32(9).u64(1);  // 7 arrays of one array each
  b.u32(0).u64(1).u8(42);                       // the 8th holds one uint8
  testing::TempDir dir;
  testing::write_file(dir.file("deep.gguf"), b.bytes());
  auto file = GgufFile::open(dir.file("deep.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufValue* v = (*file)->find_value("deep");
  for (int i = 0; i < 7; ++i) v = &v->array()[0];
  EXPECT_EQ((v->array()[0].as_uint("x")).value(), 42u);
}

TEST(Gguf, GgmlTypeNumbersAndNames) {
  EXPECT_EQ(io::ggml_type_name(3), "Q4_1");
  EXPECT_EQ(io::ggml_type_name(12), "Q4_K");
  EXPECT_EQ(io::ggml_type_name(24), "I8");
  EXPECT_EQ(io::ggml_type_name(30), "BF16");
  EXPECT_EQ(io::ggml_type_name(4), "type 4");  // removed from ggml
  EXPECT_EQ(io::ggml_type_name(99), "type 99");
  for (int i = 0; i <= static_cast<int>(kLastDType); ++i) {
    const DType dt = static_cast<DType>(i);
    if (dt == DType::kU8 || dt == DType::kBool) continue;
    auto n = io::ggml_type_from_dtype(dt);
    ASSERT_TRUE(n.has_value()) << dtype_name(dt);
    EXPECT_EQ(io::dtype_from_ggml_type(*n), dt);
    EXPECT_EQ(io::ggml_type_name(*n), dtype_name(dt));
  }
  EXPECT_FALSE(io::ggml_type_from_dtype(DType::kU8).has_value());
  EXPECT_FALSE(io::ggml_type_from_dtype(DType::kBool).has_value());
}

class GgufWriterRejects : public ::testing::Test {
 protected:
  void expect(const Status& s, const std::string& needle) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.message();
    // Nothing at the path and no temporary left beside it.
    EXPECT_TRUE(std::filesystem::is_empty(dir_.path())) << s.message();
  }
  std::string path() const { return dir_.file("out.gguf"); }
  testing::TempDir dir_;
};

TEST_F(GgufWriterRejects, DuplicateKey) {
  expect(io::write_gguf(path(), {{"a", GgufValue::u32(1)}, {"a", GgufValue::u32(2)}}, {}), "duplicate metadata key 'a'");
}
TEST_F(GgufWriterRejects, DuplicateTensor) {
  Tensor t = Tensor::zeros(DType::kF32, {4});
  expect(io::write_gguf(path(), {}, {{"w", t}, {"w", t}}), "duplicate tensor name 'w'");
}
TEST_F(GgufWriterRejects, DtypeWithoutGgufType) {
  expect(io::write_gguf(path(), {}, {{"mask", Tensor::zeros(DType::kBool, {4})}}), "'mask'");
}
TEST_F(GgufWriterRejects, QuantizedRowNotAWholeBlock) {
  expect(io::write_gguf(path(), {}, {{"q", Tensor::zeros(DType::kQ4_K, {2, 128})}}), "multiple of the Q4_K block");
}
TEST_F(GgufWriterRejects, ValueThatDoesNotFitItsType) {
  expect(io::write_gguf(path(), {{"small", scalar(GgufValueType::kU8, uint64_t{256})}}, {}), "'small'");
}
TEST_F(GgufWriterRejects, ArrayItemOfAnotherType) {
  expect(io::write_gguf(path(), {{"mixed", GgufValue::array_of(GgufValueType::kI32, {GgufValue::u32(1)})}}, {}),
         "'mixed'");
}
TEST_F(GgufWriterRejects, AlignmentKeyThatDisagrees) {
  expect(io::write_gguf(path(), {{"general.alignment", GgufValue::u32(64)}}, {}, 32), "general.alignment");
}
TEST_F(GgufWriterRejects, AlignmentNotAPowerOfTwo) { expect(io::write_gguf(path(), {}, {}, 48), "alignment 48"); }

TEST(Gguf, WriterReplacesAnExistingFile) {
  testing::TempDir dir;
  const std::string path = dir.file("x.gguf");
  testing::write_file(path, "old contents");
  ASSERT_TRUE(io::write_gguf(path, {{"k", GgufValue::u32(1)}}, {}).ok());
  ASSERT_TRUE(GgufFile::open(path).ok());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
}

// ---- malformed files, each built to have exactly one defect ----

class GgufMalformed : public ::testing::Test {
 protected:
  Status open_bytes(const std::string& bytes) {
    path_ = dir_.file(std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".gguf");
    testing::write_file(path_, bytes);
    auto file = GgufFile::open(path_);
    return file.ok() ? Status::Ok() : file.status();
  }
  void expect(const GgufBytes& b, ErrorCode code, const std::vector<std::string>& needles) {
    const Status s = open_bytes(b.bytes());
    ASSERT_FALSE(s.ok()) << "accepted";
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(path_), std::string::npos) << "message lacks the file: " << s.message();
    for (const std::string& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
  }
  // One F32 tensor info with ne {4} at `offset`, padded, then `data` bytes.
  static GgufBytes one_tensor(uint32_t type, std::vector<uint64_t> ne, uint64_t offset, size_t data) {
    GgufBytes b;
    b.header(3, 1, 0).tensor("blk.0.attn_q.weight", ne, type, offset).pad_to(32).zeros(data);
    return b;
  }

  testing::TempDir dir_;
  std::string path_;
};

TEST_F(GgufMalformed, EmptyFile) { expect(GgufBytes(), ErrorCode::kParseError, {"bad magic"}); }

TEST_F(GgufMalformed, BadMagic) {
  GgufBytes b;
  b.raw("GGML").u32(3).u64(0).u64(0);
  expect(b, ErrorCode::kParseError, {"bad magic"});
}

TEST_F(GgufMalformed, Version1) {
  GgufBytes b;
  b.header(1, 0, 0);
  expect(b, ErrorCode::kParseError, {"version 1", "versions 2 and 3"});
}

TEST_F(GgufMalformed, Version4) {
  GgufBytes b;
  b.header(4, 0, 0);
  expect(b, ErrorCode::kParseError, {"version 4"});
}

TEST_F(GgufMalformed, BigEndianFile) {
  GgufBytes b;
  b.raw("GGUF").u32(0x03000000).u64(0).u64(0);
  expect(b, ErrorCode::kParseError, {"big-endian"});
}

TEST_F(GgufMalformed, HeaderCutShort) {
  GgufBytes b;
  b.raw("GGUF").u32(3).u32(0);
  expect(b, ErrorCode::kParseError, {"tensor count", "past the end"});
}

TEST_F(GgufMalformed, TensorCountPastTheFile) {
  GgufBytes b;
  b.header(3, 1'000'000'000'000, 0).zeros(64);
  expect(b, ErrorCode::kParseError, {"tensor count 1000000000000", "past the end"});
}

TEST_F(GgufMalformed, MetadataCountPastTheFile) {
  GgufBytes b;
  b.header(3, 0, ~uint64_t{0});
  expect(b, ErrorCode::kParseError, {"metadata count", "past the end"});
}

TEST_F(GgufMalformed, KeyLengthPastTheFile) {
  GgufBytes b;
  b.header(3, 0, 1).u64(1000).raw("general.name").u32(8).str("x");
  expect(b, ErrorCode::kParseError, {"metadata entry 0 key", "string length 1000", "past the end"});
}

TEST_F(GgufMalformed, StringValueLengthPastTheFile) {
  GgufBytes b;
  b.header(3, 0, 1).str("general.name").u32(8).u64(~uint64_t{0} - 3).raw("tiny");
  expect(b, ErrorCode::kParseError, {"'general.name'", "string length", "past the end"});
}

TEST_F(GgufMalformed, UnknownValueType) {
  GgufBytes b;
  b.header(3, 0, 1).str("general.file_type").u32(13).u32(1);
  expect(b, ErrorCode::kParseError, {"'general.file_type'", "unknown value type 13"});
}

TEST_F(GgufMalformed, UnknownArrayElementType) {
  GgufBytes b;
  b.header(3, 0, 1).str("tokenizer.ggml.scores").u32(9).u32(77).u64(1).u32(0);
  expect(b, ErrorCode::kParseError, {"'tokenizer.ggml.scores'", "unknown array element type 77"});
}

TEST_F(GgufMalformed, ArrayLengthPastTheFile) {
  GgufBytes b;
  b.header(3, 0, 1).str("tokenizer.ggml.tokens").u32(9).u32(8).u64(1'000'000).str("a").str("b");
  expect(b, ErrorCode::kParseError, {"'tokenizer.ggml.tokens'", "array length 1000000", "past the end"});
}

TEST_F(GgufMalformed, ArraysNestedDeeperThanEight) {
  GgufBytes b;
  b.header(3, 0, 1).str("deep").u32(9);
  for (int i = 0; i < 8; ++i) b.u32(9).u64(1);
  b.u32(0).u64(1).u8(1);
  expect(b, ErrorCode::kParseError, {"'deep'", "nested deeper than 8"});
}

TEST_F(GgufMalformed, BoolNeitherZeroNorOne) {
  GgufBytes b;
  b.header(3, 0, 1).str("tokenizer.ggml.add_bos_token").u32(7).u8(2);
  expect(b, ErrorCode::kParseError, {"'tokenizer.ggml.add_bos_token'", "bool value 2"});
}

TEST_F(GgufMalformed, DuplicateKey) {
  GgufBytes b;
  b.header(3, 0, 2).kv_u32("llama.block_count", 2).kv_u32("llama.block_count", 3);
  expect(b, ErrorCode::kParseError, {"'llama.block_count'", "duplicate metadata key"});
}

TEST_F(GgufMalformed, AlignmentNotAPowerOfTwo) {
  GgufBytes b;
  b.header(3, 0, 1).kv_u32("general.alignment", 48);
  expect(b, ErrorCode::kParseError, {"'general.alignment'", "48", "not a power of two"});
}

TEST_F(GgufMalformed, AlignmentZero) {
  GgufBytes b;
  b.header(3, 0, 1).kv_u32("general.alignment", 0);
  expect(b, ErrorCode::kParseError, {"'general.alignment'", "not a power of two"});
}

TEST_F(GgufMalformed, AlignmentNotAnInteger) {
  GgufBytes b;
  b.header(3, 0, 1).kv_string("general.alignment", "32");
  expect(b, ErrorCode::kParseError, {"'general.alignment'", "string"});
}

TEST_F(GgufMalformed, DuplicateTensor) {
  GgufBytes b;
  b.header(3, 2, 0).tensor("output.weight", {4}, 0, 0).tensor("output.weight", {4}, 0, 32).pad_to(32).zeros(64);
  expect(b, ErrorCode::kParseError, {"'output.weight'", "duplicate tensor name"});
}

TEST_F(GgufMalformed, ZeroDims) {
  expect(one_tensor(0, {}, 0, 32), ErrorCode::kParseError, {"'blk.0.attn_q.weight'", "n_dims 0"});
}

TEST_F(GgufMalformed, FiveDims) {
  expect(one_tensor(0, {1, 1, 1, 1, 1}, 0, 32), ErrorCode::kParseError, {"'blk.0.attn_q.weight'", "n_dims 5"});
}

TEST_F(GgufMalformed, ZeroDimension) {
  expect(one_tensor(0, {4, 0}, 0, 32), ErrorCode::kParseError, {"'blk.0.attn_q.weight'", "ne[1] = 0"});
}

TEST_F(GgufMalformed, ElementCountOverflows) {
  expect(one_tensor(0, {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 32), ErrorCode::kParseError,
         {"'blk.0.attn_q.weight'", "64 bits"});
}

TEST_F(GgufMalformed, ByteCountOverflows) {
  expect(one_tensor(0, {uint64_t{1} << 62}, 0, 32), ErrorCode::kParseError,
         {"'blk.0.attn_q.weight'", "overflows"});
}

TEST_F(GgufMalformed, UnknownGgmlType) {
  expect(one_tensor(99, {4}, 0, 32), ErrorCode::kParseError, {"'blk.0.attn_q.weight'", "unknown ggml type 99"});
}

TEST_F(GgufMalformed, RemovedGgmlTypeIsUnknown) {
  expect(one_tensor(4, {32}, 0, 32), ErrorCode::kParseError, {"'blk.0.attn_q.weight'", "unknown ggml type 4"});
}

// Q8_K is llama.cpp's activation type: no published file stores weights in it.
TEST_F(GgufMalformed, KnownButUnsupportedTypeQ8_K) {
  expect(one_tensor(15, {256}, 0, 292), ErrorCode::kUnsupported, {"'blk.0.attn_q.weight'", "Q8_K", "not supported"});
}

TEST_F(GgufMalformed, KnownButUnsupportedTypeNVFP4) {
  expect(one_tensor(40, {64}, 0, 64), ErrorCode::kUnsupported, {"'blk.0.attn_q.weight'", "NVFP4"});
}

// Every block type llama.cpp publishes files in: a whole tensor reads as its type and
// byte size; a row that is not whole blocks, and data one byte short, are named errors.
TEST_F(GgufMalformed, EveryBlockTypeReadsAndChecksItsShape) {
  for (int i = static_cast<int>(DType::kQ8_0); i <= static_cast<int>(kLastDType); ++i) {
    const DType dt = static_cast<DType>(i);
    SCOPED_TRACE(std::string(dtype_name(dt)));
    const uint32_t id = io::ggml_type_from_dtype(dt).value();
    const uint64_t block = static_cast<uint64_t>(dtype_block_elements(dt));
    const size_t bytes = dtype_bytes(dt, static_cast<int64_t>(2 * block) * 3);
    {
      const GgufBytes b = one_tensor(id, {2 * block, 3}, 0, bytes);
      ASSERT_TRUE(open_bytes(b.bytes()).ok());
      auto file = GgufFile::open(path_);
      ASSERT_TRUE(file.ok());
      const io::GgufTensorInfo* t = (*file)->find("blk.0.attn_q.weight");
      ASSERT_NE(t, nullptr);
      EXPECT_EQ(t->dtype, dt);
      EXPECT_EQ(t->nbytes, bytes);
    }
    expect(one_tensor(id, {block + block / 2, 2}, 0, bytes), ErrorCode::kParseError,
           {"'blk.0.attn_q.weight'", "ne[0] = " + std::to_string(block + block / 2),
            std::string(dtype_name(dt)) + " block of " + std::to_string(block)});
    expect(one_tensor(id, {2 * block, 3}, 0, bytes - 1), ErrorCode::kOutOfRange,
           {"'blk.0.attn_q.weight'", std::to_string(bytes) + " bytes", "past the end"});
  }
}

TEST_F(GgufMalformed, RowNotAWholeBlock) {
  expect(one_tensor(8, {33, 2}, 0, 128), ErrorCode::kParseError,
         {"'blk.0.attn_q.weight'", "ne[0] = 33", "Q8_0 block of 32"});
}

TEST_F(GgufMalformed, OffsetNotAligned) {
  expect(one_tensor(0, {4}, 4, 64), ErrorCode::kParseError,
         {"'blk.0.attn_q.weight'", "offset 4", "alignment 32"});
}

TEST_F(GgufMalformed, OverlappingTensors) {
  GgufBytes b;  // 16 floats = 64 bytes at 0, another at 32
  b.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad_to(32).zeros(128);
  expect(b, ErrorCode::kParseError, {"'b'", "overlap tensor 'a'"});
}

TEST_F(GgufMalformed, DataPastTheEnd) {
  expect(one_tensor(0, {16}, 0, 60), ErrorCode::kOutOfRange, {"'blk.0.attn_q.weight'", "64 bytes", "past the end"});
}

TEST_F(GgufMalformed, OffsetPastTheEnd) {
  expect(one_tensor(0, {4}, uint64_t{1} << 63, 32), ErrorCode::kOutOfRange, {"'blk.0.attn_q.weight'", "past the end"});
}

TEST_F(GgufMalformed, TensorInfoCutShort) {
  GgufBytes b;
  b.header(3, 1, 0).str("tok_embd").u32(2).u64(8).u64(8).u32(0);  // and no offset
  expect(b, ErrorCode::kParseError, {"'tok_embd'"});
}

}  // namespace
}  // namespace loom
