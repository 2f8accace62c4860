#include "loom/core/cache_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>

#define XXH_INLINE_ALL  // header-only: no link dependency on libxxhash
#include <xxhash.h>

#include "loom/core/file_pages.h"
#include "loom/core/logging.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

// Bump when the manifest's fields or the naming change: older entries are then
// listed as unusable and evicted.
constexpr const char* kManifestFormat = "loom cache entry 1";
constexpr const char* kManifestExtension = ".entry";
constexpr int64_t kInProgressSeconds = 3600;  // a write without a manifest younger than this may still be going on

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string hash_text(const std::string& text) { return hex64(XXH64(text.data(), text.size(), 0)); }

std::string stamp_line(const std::string& name, uint64_t size, int64_t mtime_ns, uint64_t device, uint64_t inode) {
  return name + " " + std::to_string(size) + " " + std::to_string(mtime_ns) + " " + std::to_string(device) + " " +
         std::to_string(inode) + "\n";
}

std::string stamp_of(const fs::path& file, const struct stat& st) {
  return stamp_line(file.filename().string(), static_cast<uint64_t>(st.st_size),
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                    static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
}

std::string manifest_path(const std::string& base) { return base + kManifestExtension; }

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

std::string manifest_text(const CacheEntryKey& key) {
  return std::string(kManifestFormat) + "\nkind " + key.kind + "\nwhat " + one_line(key.what) + "\nloom " +
         LOOM_VERSION + "\nsource " + one_line(key.source) + "\nstamp " + hash_text(key.stamp) + "\nkey " +
         hash_text(key.key) + "\n";
}

// The manifest's fields by name ("format" for its first line); empty when it cannot be read.
std::map<std::string, std::string> read_manifest(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return out;
  out["format"] = line;
  while (std::getline(in, line)) {
    const size_t space = line.find(' ');
    if (space != std::string::npos) out[line.substr(0, space)] = line.substr(space + 1);
  }
  return out;
}

// <anything>-<16 hex digits>: the stem of an entry's files.
bool is_entry_name(const std::string& stem) {
  if (stem.size() < 18 || stem[stem.size() - 17] != '-') return false;
  return std::all_of(stem.end() - 16, stem.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

int64_t mtime_seconds(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_mtim.tv_sec) : 0;
}

std::string megabytes(uint64_t bytes) { return std::to_string(bytes / 1000000) + " MB"; }

int64_t now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Entries this process found or wrote: never evicted by it to make room (it reads them).
struct InUse {
  std::mutex mu;
  std::set<std::string> names;
};
InUse& in_use() {
  static InUse u;
  return u;
}
void note_in_use(const std::string& base) {
  InUse& u = in_use();
  std::lock_guard<std::mutex> lock(u.mu);
  u.names.insert(fs::path(base).filename().string());
}
bool used_here(const std::string& name) {
  InUse& u = in_use();
  std::lock_guard<std::mutex> lock(u.mu);
  return u.names.count(name) > 0;
}

}  // namespace

std::string cache_dir() {
  if (const char* env = std::getenv("LOOM_CACHE_DIR"); env && *env) {
    return std::string(env) == "off" ? std::string() : std::string(env);
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return (fs::path(xdg) / "loom").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "loom").string();
  return std::string();
}

std::string source_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::string();
  if (!S_ISDIR(st.st_mode)) return stamp_of(path, st);
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string out;
  for (const fs::path& f : files)
    if (::stat(f.c_str(), &st) == 0) out += stamp_of(f, st);
  return out.empty() ? std::string("empty folder\n") : out;
}

std::string source_stamp(const MappedFileIdentity& file) {
  return stamp_line(fs::path(file.path).filename().string(), file.size, file.mtime_ns, file.device, file.inode);
}

std::string cache_entry_base(const std::string& dir, const CacheEntryKey& key) {
  const std::string text = std::string(kManifestFormat) + "\n" + key.kind + "\nloom " + LOOM_VERSION + "\n" +
                           key.source + "\n" + key.stamp + "\n" + key.key;
  return (fs::path(dir) / (key.kind + "-" + hash_text(text))).string();
}

Status find_cache_entry(const std::string& dir, const CacheEntryKey& key) {
  const std::string base = cache_entry_base(dir, key);
  const std::string path = manifest_path(base);
  std::error_code ec;
  if (!fs::exists(path, ec)) return not_found(path + ": no such cache entry");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  if (!in || text.str() != manifest_text(key)) return failed_precondition(path + ": names another cache entry");
  // Its last use: what eviction goes by.
  (void)::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  note_in_use(base);
  return Status::Ok();
}

Status commit_cache_entry(const std::string& dir, const CacheEntryKey& key) {
  static std::atomic<uint64_t> counter{0};
  const std::string path = manifest_path(cache_entry_base(dir, key));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  const std::string text = manifest_text(key);
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return io_error("cannot write " + tmp);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const Status s = io_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return s;
  }
  note_in_use(cache_entry_base(dir, key));
  return Status::Ok();
}

std::vector<CacheEntryInfo> list_cache_entries(const std::string& dir) {
  std::map<std::string, CacheEntryInfo> by_name;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const std::string file = e.path().filename().string();
    const std::string stem = file.substr(0, file.find('.'));
    if (!is_entry_name(stem)) continue;
    CacheEntryInfo& info = by_name[stem];
    info.name = stem;
    info.files.push_back(e.path().string());
    info.bytes += e.file_size(ec);
    info.last_use = std::max(info.last_use, mtime_seconds(e.path().string()));
  }
  std::vector<CacheEntryInfo> out;
  for (auto& [name, info] : by_name) {
    std::sort(info.files.begin(), info.files.end());
    const std::string manifest = (fs::path(dir) / (name + kManifestExtension)).string();
    if (std::find(info.files.begin(), info.files.end(), manifest) == info.files.end()) {
      info.in_progress = now_seconds() - info.last_use < kInProgressSeconds;
      info.problem = info.in_progress ? "no manifest yet: being written, or a write cut short"
                                      : "no manifest: a write cut short, or written by an older loom";
      out.push_back(std::move(info));
      continue;
    }
    info.last_use = mtime_seconds(manifest);
    const auto fields = read_manifest(manifest);
    auto field = [&](const char* f) {
      auto it = fields.find(f);
      return it == fields.end() ? std::string() : it->second;
    };
    if (field("format") != kManifestFormat) {
      info.problem = "a manifest this loom cannot read";
    } else {
      info.kind = field("kind");
      info.what = field("what");
      info.source = field("source");
      info.loom = field("loom");
      const std::string stamp = source_stamp(info.source);
      if (info.loom != LOOM_VERSION) info.problem = "written by loom " + info.loom;
      else if (info.files.size() == 1) info.problem = "its manifest is all that is left";
      else if (stamp.empty()) info.problem = "its source is gone";
      else if (hash_text(stamp) != field("stamp")) info.problem = "its source changed since";
    }
    out.push_back(std::move(info));
  }
  return out;
}

bool remove_cache_entry(const CacheEntryInfo& entry, std::string* why) {
  std::vector<std::string> files = entry.files;
  // The manifest first: from then on nobody reads the entry, whatever is left of it.
  std::stable_partition(files.begin(), files.end(),
                        [](const std::string& f) { return f.size() > 6 && f.ends_with(kManifestExtension); });
  bool all = true;
  for (const std::string& f : files) {
    std::error_code ec;
    if (!fs::remove(f, ec) && ec) {
      all = false;
      if (why) *why = f + ": " + ec.message();
    }
  }
  return all;
}

Status make_room_in_cache(const std::string& dir, uint64_t bytes, bool new_entry) {
  uint64_t cap = 0;
  if (const char* env = std::getenv("LOOM_CACHE_MAX_GB"); env && *env) {
    char* end = nullptr;
    const double gb = std::strtod(env, &end);
    if (end == env || *end != '\0' || !(gb > 0))
      return invalid_argument(std::string("LOOM_CACHE_MAX_GB=") + env + " is not a positive number of GB");
    cap = static_cast<uint64_t>(gb * 1e9);
  }
  // The bytes the cache holds, as this process last counted them plus what it added since:
  // a new region of an entry checks the cap without listing the directory.
  static std::mutex mu;
  static std::map<std::string, uint64_t> used_by_dir;
  std::lock_guard<std::mutex> lock(mu);
  const auto known = used_by_dir.find(dir);
  uint64_t used = known == used_by_dir.end() ? 0 : known->second;

  // The cache doubles a checkpoint's disk use: it never takes a disk's last tenth (nor
  // its last GB), where a user's other work would run out of room.
  uint64_t floor = 0, free_bytes = UINT64_MAX;
  auto measure_disk = [&] {
    struct statvfs vfs {};
    if (::statvfs(dir.c_str(), &vfs) != 0) return;
    const uint64_t unit = vfs.f_frsize ? vfs.f_frsize : vfs.f_bsize;
    free_bytes = static_cast<uint64_t>(vfs.f_bavail) * unit;
    floor = std::max<uint64_t>(uint64_t{1} << 30, static_cast<uint64_t>(vfs.f_blocks) * unit / 10);
  };
  auto fits = [&] { return free_bytes >= floor + bytes && (cap == 0 || used + bytes <= cap); };
  measure_disk();
  if (!new_entry && (cap == 0 || known != used_by_dir.end()) && fits()) {
    used_by_dir[dir] = used + bytes;
    return Status::Ok();
  }

  std::vector<CacheEntryInfo> entries = list_cache_entries(dir);
  used = 0;
  for (const CacheEntryInfo& e : entries) used += e.bytes;
  auto evict = [&](const CacheEntryInfo& e, const std::string& reason) {
    std::string why;
    if (!remove_cache_entry(e, &why)) {
      log_warn("cache: cannot remove " + e.name + ": " + why);
      return;
    }
    used -= std::min(used, e.bytes);
    log_info("cache: removed " + e.name + " (" + megabytes(e.bytes) + "): " + reason);
  };
  // Entries that can never be used again go first, whatever room there is.
  std::vector<const CacheEntryInfo*> usable;
  for (const CacheEntryInfo& e : entries) {
    if (e.problem.empty()) {
      if (!used_here(e.name)) usable.push_back(&e);
    } else if (!e.in_progress) {
      evict(e, e.problem);
    }
  }
  measure_disk();
  // Then the least recently used, until the new bytes fit.
  std::sort(usable.begin(), usable.end(), [](const auto* a, const auto* b) { return a->last_use < b->last_use; });
  for (const CacheEntryInfo* e : usable) {
    if (fits()) break;
    evict(*e, "the least recently used, to make room for " + megabytes(bytes));
    measure_disk();
  }
  if (!fits()) {
    used_by_dir[dir] = used;
    if (free_bytes < floor + bytes)
      return io_error("only " + megabytes(free_bytes) + " free where " + dir + " is; the cache leaves " +
                      megabytes(floor) + " of the disk free");
    return io_error("the cache in " + dir + " holds " + megabytes(used) + " of the " + megabytes(cap) +
                    " LOOM_CACHE_MAX_GB allows in entries in use, and " + megabytes(bytes) + " more do not fit");
  }
  used_by_dir[dir] = used + bytes;
  return Status::Ok();
}

}  // namespace loom
