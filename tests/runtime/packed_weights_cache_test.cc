// The packed-weights cache (runtime/packed_weights_cache.h): the first pack of a
// weight in a mapped checkpoint file writes its layout to an entry of the cache
// directory, later packs read it back (mapped in 2 MB pages or copied, as the kernel
// allows) and hold the same bytes as packing; a record whose bytes were damaged, or
// an entry whose manifest was, is packed again, a changed checkpoint gets a new entry
// and the old one is evicted, and a cache directory that cannot be used (or has no
// room under its budget) costs only the caching.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/cache_dir.h"
#include "loom/core/file_pages.h"
#include "scoped_env.h"
#include "loom/core/quantize.h"
#include "loom/core/tensor.h"
#include "runtime/cpu/qlinear.h"
#include "loom/runtime/packed_weights_cache.h"

namespace loom::runtime {
namespace {

namespace fs = std::filesystem;
using cpu::PackedLinear;

Tensor random_f32(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n * k));
  for (float& x : v) x = dist(rng);
  return Tensor::from_f32(v, {n, k});
}

Tensor q8_0_weight(int64_t n, int64_t k, uint32_t seed) {
  const Tensor f = random_f32(n, k, seed);
  Tensor q = Tensor::empty(DType::kQ8_0, {n, k});
  const size_t row_bytes = dtype_bytes(DType::kQ8_0, k);
  for (int64_t r = 0; r < n; ++r) {
    quantize_row_ref(DType::kQ8_0, f.data_as<const float>() + r * k, q.data_as<uint8_t>() + row_bytes * r, k);
  }
  return q;
}

// A checkpoint file holding one weight, mapped and registered as io::MappedFile does.
class MappedCheckpoint {
 public:
  MappedCheckpoint(fs::path path, const Tensor& w) : path_(std::move(path)), dtype_(w.dtype()), shape_(w.shape()) {
    write(w);
  }
  ~MappedCheckpoint() { unmap(); }

  void write(const Tensor& w) {
    unmap();
    const int fd = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, w.data(), w.nbytes()), static_cast<ssize_t>(w.nbytes()));
    ::close(fd);
    // A rewrite within the clock's resolution still gets another modification time.
    struct stat st {};
    ASSERT_EQ(::stat(path_.c_str(), &st), 0);
    timespec times[2] = {st.st_atim, st.st_mtim};
    times[1].tv_sec += ++rewrites_;
    ASSERT_EQ(::utimensat(AT_FDCWD, path_.c_str(), times, 0), 0);
    map();
  }
  Tensor tensor() const { return Tensor::wrap(map_, dtype_, shape_); }

 private:
  void map() {
    const int fd = ::open(path_.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    struct stat st {};
    ASSERT_EQ(::fstat(fd, &st), 0);
    bytes_ = static_cast<size_t>(st.st_size);
    map_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    ASSERT_NE(map_, MAP_FAILED);
    MappedFileIdentity id;
    id.path = fs::canonical(path_).string();
    id.device = st.st_dev;
    id.inode = st.st_ino;
    id.size = bytes_;
    id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    register_file_mapping(map_, bytes_, id);
  }
  void unmap() {
    if (!map_) return;
    unregister_file_mapping(map_);
    ::munmap(map_, bytes_);
    map_ = nullptr;
  }

  fs::path path_;
  DType dtype_;
  Shape shape_;
  void* map_ = nullptr;
  size_t bytes_ = 0;
  int rewrites_ = 0;
};

// A packed-weights entry of the cache, as the listing gives it.
struct PackedEntry {
  std::string path;  // its .bin file
  size_t tensors = 0;
  std::string checkpoint_file, problem, manifest;
};

class PackedWeightsCache : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("loom_packed_cache_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    cache_ = root_ / "cache";
    cache_env_.emplace("LOOM_CACHE_DIR", cache_.string());
  }
  void TearDown() override {
    cache_env_.reset();
    fs::remove_all(root_);
  }
  std::vector<PackedEntry> files() const {
    std::vector<PackedEntry> out;
    if (!fs::exists(cache_)) return out;
    for (const CacheEntryInfo& e : list_cache_entries(cache_.string())) {
      if (e.kind != "packed") continue;
      PackedEntry p{"", packed_weights_in(e), e.source, e.problem, ""};
      for (const std::string& f : e.files) {
        if (f.ends_with(".bin")) p.path = f;
        if (f.ends_with(".entry")) p.manifest = f;
      }
      out.push_back(p);
    }
    return out;
  }

  fs::path root_, cache_;
  std::optional<test::ScopedEnv> cache_env_;
};

// What packing the weight in memory makes of it, in the layout a file's mapping gets.
PackedLinear reference_pack(const Tensor& w, const Tensor* bias) {
  const Tensor copy = w.clone();
  const auto layout = dtype_is_quantized(w.dtype()) ? cpu::QuantLayout::kInterleaved : cpu::QuantLayout::kAuto;
  return PackedLinear::pack(copy, bias, layout).value();
}

void expect_same_packing(const PackedLinear& got, const PackedLinear& want, const Tensor& w) {
  const size_t bytes = PackedLinear::layout_for(w, dtype_is_quantized(w.dtype()) ? cpu::QuantLayout::kInterleaved
                                                                                   : cpu::QuantLayout::kAuto)
                           ->data_bytes;
  ASSERT_GT(bytes, 0u);
  ASSERT_NE(got.packed_copy(), nullptr);
  EXPECT_EQ(got.quant_group_rows(), want.quant_group_rows());
  EXPECT_EQ(std::memcmp(got.packed_copy(), want.packed_copy(), bytes), 0) << w.describe();
  ASSERT_EQ(got.has_bias(), want.has_bias());
  if (got.has_bias()) {
    EXPECT_EQ(std::memcmp(got.bias(), want.bias(), sizeof(float) * static_cast<size_t>(w.dim(0))), 0);
  }
}

TEST_F(PackedWeightsCache, FirstPackWritesTheLayoutAndLaterPacksReadIt) {
  // 4 MB of bf16 panels (whole 2 MB pages, mapped in place where the kernel can), a
  // 128 KB one (copied), and Q8_0 rows interleaved in groups of 8.
  struct Case {
    Tensor weight;
    bool with_bias;
  };
  std::vector<Case> cases = {{random_f32(1000, 2048, 1).to(DType::kBF16), true},
                             {random_f32(40, 1024, 2).to(DType::kBF16), false}};
  // Quantized rows are copied (interleaved) only where a SIMD path reads them so;
  // else they are read in place and there is nothing to cache.
  if (cpu::detail::decode_prefers_interleaved(DType::kQ8_0)) cases.push_back({q8_0_weight(64, 2048, 3), false});
  int i = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.weight.describe());
    const Tensor bias = random_f32(1, c.weight.dim(0), 9).reshape({c.weight.dim(0)});
    const Tensor* b = c.with_bias ? &bias : nullptr;
    MappedCheckpoint file(root_ / ("weight" + std::to_string(i++) + ".bin"), c.weight);
    const PackedLinear want = reference_pack(c.weight, b);
    const size_t before = files().size();

    {
      auto first = pack_through_cache(file.tensor(), b);
      ASSERT_TRUE(first.ok()) << first.status().message();
      expect_same_packing(*first, want, c.weight);
      ASSERT_EQ(files().size(), before + 1);
      // A second load while the first lives shares its bytes.
      auto second = pack_through_cache(file.tensor(), b);
      ASSERT_TRUE(second.ok()) << second.status().message();
      EXPECT_EQ(second->packed_copy(), first->packed_copy());
    }
    // Once they are gone, later loads read the file back (twice: nothing appended).
    for (int round = 0; round < 2; ++round) {
      auto again = pack_through_cache(file.tensor(), b);
      ASSERT_TRUE(again.ok()) << again.status().message();
      expect_same_packing(*again, want, c.weight);
    }
    for (const PackedEntry& f : files()) {
      EXPECT_TRUE(f.problem.empty()) << f.path << ": " << f.problem;
      EXPECT_EQ(f.tensors, 1u) << f.path;
    }
  }
}

TEST_F(PackedWeightsCache, WeightsOfOneFilePackedFromManyThreadsGetTheirOwnRegions) {
  // 64 weights in one checkpoint file, packed by 8 threads at once: each region is
  // reserved under the file's lock, which a flock alone does not give threads of one
  // process (a model load packs from several threads).
  constexpr int kWeights = 64, kThreads = 8;
  constexpr int64_t N = 64, K = 512;  // 64 KB each: the smallest cached
  const Tensor all = random_f32(N * kWeights, K, 11).to(DType::kBF16);
  MappedCheckpoint file(root_ / "weights.bin", all);
  const size_t rows_bytes = all.nbytes() / kWeights;
  auto weight = [&](const Tensor& t, int i) {
    return Tensor::wrap(static_cast<uint8_t*>(t.data()) + rows_bytes * i, DType::kBF16, {N, K});
  };
  for (int round = 0; round < 2; ++round) {  // packed, then read back
    std::vector<Result<PackedLinear>> got(kWeights, invalid_argument("not run"));
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        while (!go.load()) std::this_thread::yield();
        for (int i = t; i < kWeights; i += kThreads) got[i] = pack_through_cache(weight(file.tensor(), i), nullptr);
      });
    }
    go = true;
    for (auto& t : threads) t.join();
    for (int i = 0; i < kWeights; ++i) {
      ASSERT_TRUE(got[i].ok()) << got[i].status().message();
      const Tensor w = weight(all, i);
      expect_same_packing(*got[i], reference_pack(w, nullptr), w);
    }
  }
  ASSERT_EQ(files().size(), 1u);
  EXPECT_EQ(files()[0].tensors, static_cast<size_t>(kWeights));
}

TEST_F(PackedWeightsCache, DamagedBytesArePackedAgain) {
  const Tensor w = random_f32(64, 2048, 4).to(DType::kBF16);
  MappedCheckpoint file(root_ / "weight.bin", w);
  ASSERT_TRUE(pack_through_cache(file.tensor(), nullptr).ok());
  ASSERT_EQ(files().size(), 1u);
  {
    // The one region follows the 4 KB header page.
    const int fd = ::open(files()[0].path.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    const uint32_t junk = 0xdeadbeef;
    ASSERT_EQ(::pwrite(fd, &junk, sizeof junk, 4096 + 1000), static_cast<ssize_t>(sizeof junk));
    ::close(fd);
  }
  auto again = pack_through_cache(file.tensor(), nullptr);
  ASSERT_TRUE(again.ok());
  expect_same_packing(*again, reference_pack(w, nullptr), w);
  ASSERT_EQ(files().size(), 1u);
  EXPECT_EQ(files()[0].tensors, 2u) << "the damaged record stays, a new one is appended";
  // The next load reads the new record, not the damaged one.
  auto third = pack_through_cache(file.tensor(), nullptr);
  ASSERT_TRUE(third.ok());
  expect_same_packing(*third, reference_pack(w, nullptr), w);
  EXPECT_EQ(files()[0].tensors, 2u);
}

TEST_F(PackedWeightsCache, AnEntryWhoseManifestWasDamagedIsPackedAgain) {
  const Tensor w = random_f32(64, 2048, 12).to(DType::kBF16);
  MappedCheckpoint file(root_ / "weight.bin", w);
  ASSERT_TRUE(pack_through_cache(file.tensor(), nullptr).ok());
  ASSERT_EQ(files().size(), 1u);
  std::ofstream(files()[0].manifest) << "junk";
  const std::vector<CacheEntryInfo> damaged = list_cache_entries(cache_.string());
  ASSERT_EQ(damaged.size(), 1u);
  EXPECT_EQ(damaged[0].problem, "a manifest this loom cannot read");
  auto again = pack_through_cache(file.tensor(), nullptr);
  ASSERT_TRUE(again.ok());
  expect_same_packing(*again, reference_pack(w, nullptr), w);
  ASSERT_EQ(files().size(), 1u);
  EXPECT_EQ(files()[0].problem, "");
  EXPECT_EQ(files()[0].tensors, 1u) << "packed again into a new entry, not appended to the damaged one";
}

TEST_F(PackedWeightsCache, ARegionBeyondTheCacheBudgetIsPackedInMemory) {
  const Tensor w = random_f32(64, 2048, 13).to(DType::kBF16);  // 256 KB packed
  MappedCheckpoint file(root_ / "weight.bin", w);
  test::ScopedEnv budget("LOOM_CACHE_MAX_GB", "0.0001");  // 100 KB
  auto packed = pack_through_cache(file.tensor(), nullptr);
  ASSERT_TRUE(packed.ok()) << packed.status().message();
  expect_same_packing(*packed, reference_pack(w, nullptr), w);
  for (const PackedEntry& f : files()) EXPECT_EQ(f.tensors, 0u);
}

TEST_F(PackedWeightsCache, ChangedCheckpointGetsANewFileThatReplacesTheOld) {
  const Tensor w1 = random_f32(64, 2048, 5).to(DType::kBF16);
  const Tensor w2 = random_f32(64, 2048, 6).to(DType::kBF16);
  MappedCheckpoint file(root_ / "weight.bin", w1);
  ASSERT_TRUE(pack_through_cache(file.tensor(), nullptr).ok());
  const auto old_files = files();
  ASSERT_EQ(old_files.size(), 1u);

  file.write(w2);  // same path and size, other bytes and modification time
  auto packed = pack_through_cache(file.tensor(), nullptr);
  ASSERT_TRUE(packed.ok());
  expect_same_packing(*packed, reference_pack(w2, nullptr), w2);
  const auto now = files();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0].path, old_files[0].path);
  EXPECT_FALSE(fs::exists(old_files[0].path));
  EXPECT_EQ(now[0].checkpoint_file, fs::canonical(root_ / "weight.bin").string());
}

// Weights the weights cache made live in a file of the cache directory; when it
// replaces that file, the packing of the old one goes with the next packing written.
TEST_F(PackedWeightsCache, APackingOfACacheFileThatIsGoneIsRemoved) {
  const Tensor w1 = random_f32(64, 2048, 9).to(DType::kBF16);
  const Tensor w2 = random_f32(64, 2048, 10).to(DType::kBF16);
  fs::create_directories(cache_);
  {
    MappedCheckpoint made(cache_ / "converted-old.gguf", w1);
    ASSERT_TRUE(pack_through_cache(made.tensor(), nullptr).ok());
  }
  const auto old_files = files();
  ASSERT_EQ(old_files.size(), 1u);
  fs::remove(cache_ / "converted-old.gguf");
  MappedCheckpoint elsewhere(root_ / "weight.bin", w2);
  ASSERT_TRUE(pack_through_cache(elsewhere.tensor(), nullptr).ok());
  const auto now = files();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_FALSE(fs::exists(old_files[0].path));
  EXPECT_EQ(now[0].checkpoint_file, fs::canonical(root_ / "weight.bin").string());
}

TEST_F(PackedWeightsCache, NothingIsWrittenForWeightsInMemoryOrWithTheCacheOff) {
  const Tensor w = random_f32(64, 2048, 7).to(DType::kBF16);
  auto in_memory = pack_through_cache(w, nullptr);
  ASSERT_TRUE(in_memory.ok());
  expect_same_packing(*in_memory, reference_pack(w, nullptr), w);
  EXPECT_FALSE(fs::exists(cache_));

  MappedCheckpoint file(root_ / "weight.bin", w);
  setenv("LOOM_CACHE_DIR", "off", 1);
  auto off = pack_through_cache(file.tensor(), nullptr);
  ASSERT_TRUE(off.ok());
  expect_same_packing(*off, reference_pack(w, nullptr), w);
  EXPECT_FALSE(fs::exists(cache_));
}

TEST_F(PackedWeightsCache, ACacheDirectoryThatCannotBeMadeOnlyCostsTheCaching) {
  const Tensor w = random_f32(64, 2048, 8).to(DType::kBF16);
  MappedCheckpoint file(root_ / "weight.bin", w);
  {
    const int fd = ::open((root_ / "a-file").c_str(), O_CREAT | O_WRONLY, 0644);
    ASSERT_GE(fd, 0);
    ::close(fd);
  }
  setenv("LOOM_CACHE_DIR", (root_ / "a-file" / "cache").c_str(), 1);  // under a regular file
  for (int round = 0; round < 2; ++round) {
    auto packed = pack_through_cache(file.tensor(), nullptr);
    ASSERT_TRUE(packed.ok()) << packed.status().message();
    expect_same_packing(*packed, reference_pack(w, nullptr), w);
  }
}

}  // namespace
}  // namespace loom::runtime
