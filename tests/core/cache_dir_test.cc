// The cache directory's one store (core/cache_dir.h): entries named by their key and
// source, found only while their manifest names that key, listed with kind, source,
// size, last use and why they can never be used again, and one eviction rule for
// every kind: those first, then the least recently used, never one this process uses.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/cache_dir.h"
#include "loom/core/file_pages.h"
#include "scoped_env.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class CacheDir : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("loom_cache_dir_test_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    dir_ = root_ / "cache";
    fs::create_directories(dir_);
    fs::create_directories(root_ / "sources");
  }
  void TearDown() override { fs::remove_all(root_); }

  // A source file of `bytes` bytes.
  std::string source(const std::string& name, size_t bytes = 16) const {
    const fs::path p = root_ / "sources" / name;
    std::ofstream(p, std::ios::binary) << std::string(bytes, 'x');
    return p.string();
  }
  CacheEntryKey key_of(const std::string& kind, const std::string& src, const std::string& extra = "k") const {
    return {kind, kind + " of " + fs::path(src).filename().string(), src, source_stamp(src), extra};
  }
  // The entry's payload (bytes of it) and manifest, as a user of the store writes them.
  void write_entry(const CacheEntryKey& key, size_t bytes) const {
    std::ofstream(cache_entry_base(dir_.string(), key) + ".payload", std::ios::binary) << std::string(bytes, 'p');
    ASSERT_TRUE(commit_cache_entry(dir_.string(), key).ok());
  }
  // The same, by another process: this one has not used it, so eviction may take it.
  void write_entry_elsewhere(const CacheEntryKey& key, size_t bytes) const {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      std::ofstream(cache_entry_base(dir_.string(), key) + ".payload", std::ios::binary) << std::string(bytes, 'p');
      ::_exit(commit_cache_entry(dir_.string(), key).ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  // Sets an entry's last use (its manifest's modification time) to `ago` seconds before now.
  void set_last_use(const CacheEntryKey& key, int ago) const {
    const fs::path manifest = cache_entry_base(dir_.string(), key) + ".entry";
    fs::last_write_time(manifest, fs::file_time_type::clock::now() - std::chrono::seconds(ago));
  }
  const CacheEntryInfo* find(const std::vector<CacheEntryInfo>& entries, const CacheEntryKey& key) const {
    const std::string name = fs::path(cache_entry_base(dir_.string(), key)).filename().string();
    for (const CacheEntryInfo& e : entries)
      if (e.name == name) return &e;
    return nullptr;
  }

  fs::path root_, dir_;
};

TEST_F(CacheDir, AnEntryIsFoundOnlyUnderItsOwnKeyOnceCommitted) {
  const std::string src = source("model.gguf");
  const CacheEntryKey key = key_of("weights", src);
  EXPECT_EQ(find_cache_entry(dir_.string(), key).code(), ErrorCode::kNotFound);
  write_entry(key, 100);
  EXPECT_TRUE(find_cache_entry(dir_.string(), key).ok());

  CacheEntryKey other_key = key;
  other_key.key = "another recipe";
  CacheEntryKey other_kind = key;
  other_kind.kind = "packed";
  for (const CacheEntryKey& k : {other_key, other_kind}) {
    EXPECT_NE(cache_entry_base(dir_.string(), k), cache_entry_base(dir_.string(), key));
    EXPECT_FALSE(find_cache_entry(dir_.string(), k).ok());
  }
  // A manifest written over (or by something else) does not pass for the entry.
  std::ofstream(cache_entry_base(dir_.string(), key) + ".entry") << "loom cache entry 1\nkind weights\n";
  const Status damaged = find_cache_entry(dir_.string(), key);
  EXPECT_EQ(damaged.code(), ErrorCode::kFailedPrecondition) << damaged.message();
}

TEST_F(CacheDir, AChangedSourceIsAnotherEntry) {
  const std::string src = source("model.safetensors");
  const CacheEntryKey before = key_of("weights", src);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  source("model.safetensors", 17);
  EXPECT_NE(source_stamp(src), before.stamp);
  EXPECT_NE(cache_entry_base(dir_.string(), key_of("weights", src)), cache_entry_base(dir_.string(), before));
  EXPECT_EQ(source_stamp((root_ / "nothing").string()), "");
  // A folder's stamp is its files'.
  const std::string folder = (root_ / "sources").string();
  const std::string stamp = source_stamp(folder);
  source("config.json");
  EXPECT_NE(source_stamp(folder), stamp);
}

TEST_F(CacheDir, AMappedFileIsStampedAsItsPathIs) {
  const std::string src = source("shard.safetensors");
  struct stat st {};
  ASSERT_EQ(::stat(src.c_str(), &st), 0);
  MappedFileIdentity id;
  id.path = src;
  id.device = st.st_dev;
  id.inode = st.st_ino;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  EXPECT_EQ(source_stamp(id), source_stamp(src)) << "else the listing would call every packed entry changed";
}

TEST_F(CacheDir, TheListingShowsEveryEntryWithWhyItCanNoLongerBeUsed) {
  const std::string kept = source("kept.gguf"), gone = source("gone.gguf"), changed = source("changed.gguf");
  const CacheEntryKey a = key_of("weights", kept), b = key_of("packed", gone), c = key_of("packed", changed);
  write_entry(a, 1000);
  write_entry(b, 2000);
  write_entry(c, 3000);
  fs::remove(gone);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  source("changed.gguf", 99);
  // A file of an older loom (no manifest), and a write going on now.
  std::ofstream(dir_ / "quantized-q4_k_m-0123456789abcdef.gguf") << "old";
  fs::last_write_time(dir_ / "quantized-q4_k_m-0123456789abcdef.gguf",
                      fs::file_time_type::clock::now() - std::chrono::hours(2));
  std::ofstream(dir_ / "weights-fedcba9876543210.gguf.tmp.1.0") << "partial";
  std::ofstream(dir_ / "notes.txt") << "not loom's";

  const std::vector<CacheEntryInfo> entries = list_cache_entries(dir_.string());
  ASSERT_EQ(entries.size(), 5u);
  const CacheEntryInfo* ea = find(entries, a);
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->kind, "weights");
  EXPECT_EQ(ea->what, "weights of kept.gguf");
  EXPECT_EQ(ea->source, kept);
  EXPECT_EQ(ea->problem, "");
  EXPECT_EQ(ea->files.size(), 2u);
  EXPECT_GT(ea->bytes, 1000u);
  EXPECT_LE(std::abs(ea->last_use - std::chrono::duration_cast<std::chrono::seconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count()),
            60);
  ASSERT_NE(find(entries, b), nullptr);
  EXPECT_EQ(find(entries, b)->kind, "packed");
  EXPECT_EQ(find(entries, b)->problem, "its source is gone");
  ASSERT_NE(find(entries, c), nullptr);
  EXPECT_EQ(find(entries, c)->problem, "its source changed since");
  for (const CacheEntryInfo& e : entries) {
    if (e.name == "quantized-q4_k_m-0123456789abcdef") {
      EXPECT_FALSE(e.in_progress);
      EXPECT_NE(e.problem, "");
    }
    if (e.name == "weights-fedcba9876543210") {
      EXPECT_TRUE(e.in_progress);
      EXPECT_NE(e.problem, "");
    }
  }
  for (const CacheEntryInfo& e : entries) EXPECT_TRUE(remove_cache_entry(e, nullptr)) << e.name;
  EXPECT_TRUE(list_cache_entries(dir_.string()).empty());
  EXPECT_TRUE(fs::exists(dir_ / "notes.txt"));
}

TEST_F(CacheDir, AHitIsALastUse) {
  const CacheEntryKey key = key_of("packed", source("a.bin"));
  write_entry(key, 10);
  set_last_use(key, 3600);
  const int64_t before = list_cache_entries(dir_.string())[0].last_use;
  ASSERT_TRUE(find_cache_entry(dir_.string(), key).ok());
  EXPECT_GE(list_cache_entries(dir_.string())[0].last_use, before + 3000);
}

// One rule for both kinds: what can never be used again goes first, then the least
// recently used whatever its kind, until the new bytes fit the budget; an entry this
// process uses stays, however old.
TEST_F(CacheDir, EvictionGoesByLastUseAcrossKinds) {
  constexpr size_t kMB = 1000000;
  const CacheEntryKey oldest_packed = key_of("packed", source("a.safetensors"));
  const CacheEntryKey older_weights = key_of("weights", source("b.gguf"));
  const CacheEntryKey newest_packed = key_of("packed", source("c.safetensors"));
  const CacheEntryKey stale = key_of("weights", source("d.gguf"));
  const CacheEntryKey used_here = key_of("weights", source("e.gguf"));
  write_entry_elsewhere(oldest_packed, kMB);
  write_entry_elsewhere(older_weights, kMB);
  write_entry_elsewhere(newest_packed, kMB);
  write_entry_elsewhere(stale, 10);
  write_entry(used_here, kMB);
  set_last_use(oldest_packed, 300);
  set_last_use(older_weights, 200);
  set_last_use(newest_packed, 100);
  set_last_use(used_here, 1000);
  fs::remove(stale.source);

  {
    test::ScopedEnv budget("LOOM_CACHE_MAX_GB", "0.0035");  // 3.5 MB: three of the four entries, with 1 MB more
    ASSERT_TRUE(make_room_in_cache(dir_.string(), kMB, true).ok());
  }
  const std::vector<CacheEntryInfo> left = list_cache_entries(dir_.string());
  EXPECT_EQ(find(left, stale), nullptr) << "its source is gone: first to go, though small";
  EXPECT_EQ(find(left, oldest_packed), nullptr) << "least recently used";
  EXPECT_EQ(find(left, older_weights), nullptr) << "next least recently used, of the other kind";
  EXPECT_NE(find(left, newest_packed), nullptr);
  EXPECT_NE(find(left, used_here), nullptr) << "used by this process";
  EXPECT_EQ(left.size(), 2u);

  // More than the budget can ever hold is refused, naming the budget; room there is.
  test::ScopedEnv budget("LOOM_CACHE_MAX_GB", "0.0035");
  const Status too_big = make_room_in_cache(dir_.string(), 4 * kMB, false);
  EXPECT_EQ(too_big.code(), ErrorCode::kIoError);
  EXPECT_NE(too_big.message().find("LOOM_CACHE_MAX_GB"), std::string::npos) << too_big.message();
  EXPECT_EQ(find(list_cache_entries(dir_.string()), used_here) != nullptr, true);
  EXPECT_TRUE(make_room_in_cache(dir_.string(), kMB / 2, false).ok());
}

TEST_F(CacheDir, AWrongBudgetIsNamed) {
  test::ScopedEnv budget("LOOM_CACHE_MAX_GB", "lots");
  const Status s = make_room_in_cache(dir_.string(), 1, true);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOOM_CACHE_MAX_GB=lots"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace loom
