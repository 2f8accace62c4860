// Every malformed-file case gets its own test: the specific ErrorCode, a message
// naming the file (and the tensor where there is one), and no crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "io/io_test_util.h"
#include "loom/io/safetensors.h"
#include "loom/io/safetensors_writer.h"

namespace loom {
namespace {

class Malformed : public ::testing::Test {
 protected:
  // Writes `bytes` to a file named after the test and opens it.
  Status open_bytes(const std::string& bytes) {
    path_ = dir_.file(std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".safetensors");
    testing::write_file(path_, bytes);
    auto file = SafetensorsFile::open(path_);
    return file.ok() ? Status::Ok() : file.status();
  }
  // A header with the given JSON and `data_bytes` zero bytes of data.
  Status open_header(const std::string& json, size_t data_bytes) {
    return open_bytes(testing::raw_safetensors(json, std::string(data_bytes, '\0')));
  }
  void expect(const Status& s, ErrorCode code, const std::vector<std::string>& needles) {
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), code) << s.to_string();
    EXPECT_NE(s.message().find(path_), std::string::npos) << "message lacks the file: " << s.message();
    for (const std::string& n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << s.message();
  }

  testing::TempDir dir_;
  std::string path_;
};

TEST_F(Malformed, EmptyFile) { expect(open_bytes(""), ErrorCode::kParseError, {"0 bytes"}); }

TEST_F(Malformed, ShorterThanEightBytes) { expect(open_bytes("abcde"), ErrorCode::kParseError, {"5 bytes"}); }

TEST_F(Malformed, HeaderLengthBeyondFile) {
  expect(open_bytes(testing::le64(999) + "{}"), ErrorCode::kParseError, {"header length 999", "beyond"});
}

TEST_F(Malformed, HeaderLengthHuge) {
  expect(open_bytes(testing::le64(~uint64_t{0}) + "{}"), ErrorCode::kParseError, {"beyond"});
}

TEST_F(Malformed, HeaderNotJson) {
  expect(open_header(R"({"w": {"dtype": "F32",)", 0), ErrorCode::kParseError, {"not valid JSON"});
}

TEST_F(Malformed, HeaderNotUtf8) {
  expect(open_header("{\"w\xff\":{}}", 0), ErrorCode::kParseError, {"not valid JSON"});
}

TEST_F(Malformed, HeaderNotAnObject) {
  expect(open_header("[1, 2, 3]", 0), ErrorCode::kParseError, {"must be a JSON object"});
}

TEST_F(Malformed, DtypeKnownToSafetensorsButNotLoom) {
  expect(open_header(R"({"fp8.weight":{"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]}})", 4),
         ErrorCode::kUnsupported, {"fp8.weight", "F8_E4M3"});
}

TEST_F(Malformed, DtypeUnknownToSafetensors) {
  expect(open_header(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", 4), ErrorCode::kParseError,
         {"'w'", "unknown dtype 'F33'"});
}

TEST_F(Malformed, ShapeTimesDtypeDiffersFromByteRange) {
  expect(open_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                     R"("proj.weight":{"dtype":"BF16","shape":[2,3],"data_offsets":[8,18]}})",
                     18),
         ErrorCode::kParseError, {"proj.weight", "needs 12 bytes", "span 10"});
}

TEST_F(Malformed, OffsetsBeyondFile) {
  expect(open_header(R"({"big":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8), ErrorCode::kOutOfRange,
         {"'big'", "beyond the data section"});
}

TEST_F(Malformed, OffsetsReversed) {
  expect(open_header(R"({"rev":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8), ErrorCode::kParseError,
         {"'rev'", "reversed"});
}

TEST_F(Malformed, OffsetsOverlapAnotherTensor) {
  expect(open_header(R"({"first":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                     R"("second":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                     16),
         ErrorCode::kParseError, {"'second'", "overlap", "'first'"});
}

TEST_F(Malformed, OverlapAcrossAnEmptyTensor) {
  // The zero-length tensor between them overlaps nothing; "inner" still
  // overlaps "outer".
  expect(open_header(R"({"outer":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                     R"("nothing":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                     R"("inner":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                     16),
         ErrorCode::kParseError, {"'inner'", "overlap", "'outer'"});
}

TEST_F(Malformed, DuplicateTensorNames) {
  expect(open_header(R"({"dup":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("dup":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     8),
         ErrorCode::kParseError, {"duplicate tensor name 'dup'"});
}

TEST_F(Malformed, NegativeDimension) {
  expect(open_header(R"({"neg":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,0]}})", 0), ErrorCode::kParseError,
         {"'neg'", "shape[0]", "negative"});
}

TEST_F(Malformed, NonIntegerDimension) {
  expect(open_header(R"({"frac":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8), ErrorCode::kParseError,
         {"'frac'", "shape[0]", "non-negative integer"});
}

TEST_F(Malformed, DimensionProductOverflows) {
  expect(open_header(R"({"huge":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0),
         ErrorCode::kParseError, {"'huge'", "overflow"});
}

TEST_F(Malformed, MissingDtype) {
  expect(open_header(R"({"nodt":{"shape":[1],"data_offsets":[0,4]}})", 4), ErrorCode::kParseError,
         {"'nodt'", "missing \"dtype\""});
}

TEST_F(Malformed, MissingShape) {
  expect(open_header(R"({"nosh":{"dtype":"F32","data_offsets":[0,4]}})", 4), ErrorCode::kParseError,
         {"'nosh'", "missing \"shape\""});
}

TEST_F(Malformed, MalformedDataOffsets) {
  expect(open_header(R"({"off":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), ErrorCode::kParseError,
         {"'off'", "data_offsets"});
}

TEST_F(Malformed, NegativeOffset) {
  expect(open_header(R"({"noff":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4), ErrorCode::kParseError,
         {"'noff'", "data_offsets[0]", "negative"});
}

TEST_F(Malformed, EntryNotAnObject) {
  expect(open_header(R"({"scalar":3})", 0), ErrorCode::kParseError, {"'scalar'", "must be an object"});
}

TEST_F(Malformed, MetadataValueNotAString) {
  expect(open_header(R"({"__metadata__":{"format":"pt","step":3}})", 0), ErrorCode::kParseError,
         {"__metadata__", "'step'"});
}

TEST_F(Malformed, MissingFileIsNotFound) {
  path_ = dir_.file("absent.safetensors");
  auto file = SafetensorsFile::open(path_);
  expect(file.status(), ErrorCode::kNotFound, {});
}

TEST_F(Malformed, DirectoryIsNotAFile) {
  path_ = dir_.path();
  auto file = SafetensorsFile::open(path_);
  expect(file.status(), ErrorCode::kInvalidArgument, {"not a regular file"});
}

TEST(SafetensorsLenient, GapsTrailingBytesAndEmptyTensorsAreAccepted) {
  // Gaps and trailing bytes are harmless to a reader; zero-length tensors may
  // share an offset with anything.
  testing::TempDir dir;
  const std::string path = dir.file("gaps.safetensors");
  testing::write_file(path, testing::raw_safetensors(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                                     R"("z_empty":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},)"
                                                     R"("a_empty":{"dtype":"I64","shape":[0],"data_offsets":[8,8]},)"
                                                     R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                                                     std::string(20, '\0')));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::vector<std::string> order;
  for (const TensorInfo& t : (*file)->tensors()) order.push_back(t.name);
  // Sorted by offset; the two empty tensors tied at 8 keep their header order.
  EXPECT_EQ(order, (std::vector<std::string>{"a", "z_empty", "a_empty", "b"}));
}

// Opening must never crash: every truncation and many random corruptions of a
// valid file either open (and then every view reads only mapped bytes, which
// the sanitizer build checks: scripts/test-sanitized runs this group under
// ASan/UBSan, and tests/fuzz/io_safetensors_header_fuzz.cc goes further) or
// fail with a Status.
void open_and_touch(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  if (!file.ok()) {
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
    return;
  }
  for (const TensorInfo& t : (*file)->tensors()) {
    Tensor v = (*file)->view(t);
    const auto* p = static_cast<const uint8_t*>(v.data());
    unsigned sum = 0;
    for (size_t i = 0; i < v.nbytes(); ++i) sum += p[i];
    (void)sum;
  }
}

TEST(SafetensorsRobustness, TruncationsAndCorruptionsNeverCrash) {
  testing::TempDir dir;
  const std::string good = dir.file("good.safetensors");
  ASSERT_TRUE(write_safetensors(good,
                                {{"a", Tensor::from_f32({1, 2, 3, 4, 5, 6}, {2, 3})},
                                 {"b", Tensor::from_f32({7, 8}, {2}).to(DType::kBF16)},
                                 {"c", Tensor::zeros(DType::kI64, {3})}},
                                {{"format", "pt"}}, SafetensorsOrder::kLikePython)
                  .ok());
  const std::string bytes = testing::read_file(good);
  const std::string path = dir.file("mutant.safetensors");
  for (size_t len = 0; len < bytes.size(); ++len) {
    testing::write_file(path, bytes.substr(0, len));
    auto file = SafetensorsFile::open(path);
    EXPECT_FALSE(file.ok()) << "truncated to " << len;  // offsets then point past the end
  }
  std::mt19937 rng(1234);
  size_t header_end = 8;
  for (int i = 0; i < 8; ++i) header_end += static_cast<size_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  const char alphabet[] = "0123456789,:[]{}\"-eE. FIU";
  for (int trial = 0; trial < 500; ++trial) {
    std::string m = bytes;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % header_end;
      m[pos] = rng() % 2 ? static_cast<char>(rng() % 256) : alphabet[rng() % (sizeof(alphabet) - 1)];
    }
    testing::write_file(path, m);
    open_and_touch(path);
  }
}

}  // namespace
}  // namespace loom
