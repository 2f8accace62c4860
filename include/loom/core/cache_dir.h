// The directory loom keeps files it makes from a checkpoint in, so that later loads
// map them instead of making them again: weights converted or quantized at load
// (weights/weights_cache.h) and weights packed into the kernels' layouts
// (runtime/packed_weights_cache.h). Both are entries of one store, with one naming
// scheme, one validation, one eviction rule and one listing (`loom cache`); the
// layers above supply only their payloads.
//
// An entry is the files <kind>-<hash>.* of the directory: its payload (a GGUF file;
// a packed-weights file and its index) and <kind>-<hash>.entry, a small text
// manifest written atomically (a temporary renamed over it) once the entry can be
// read. The hash covers the kind, loom's version, the source's absolute path and
// stamp (size, modification time, device and inode of the source file, or of every
// file of a source folder) and whatever else the payload depends on, so a changed
// checkpoint gets another entry. The manifest names the source and its stamp, so the
// listing can tell an entry whose source changed or is gone; its modification time
// is the entry's last use, set on every hit.
//
// The one eviction rule (make_room_in_cache), applied whenever an entry is created
// or grows: entries that can never be used again go first (source gone or changed,
// written by another loom, a manifest that does not read back, or a write cut short
// over an hour ago), then the least recently used, until the cache with the new
// bytes stays within LOOM_CACHE_MAX_GB (no limit when unset) and leaves the disk's
// last tenth (at least 1 GB) free. Entries this process uses are never evicted
// to make room, and a file mapped when its entry goes stays valid (Linux unlinks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/status.h"

namespace loom {

struct MappedFileIdentity;

// LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else $HOME/.cache/loom; "" when
// LOOM_CACHE_DIR is "off" (or there is no home): then nothing is cached.
std::string cache_dir();

// What a source file or folder is now (size, modification time, device, inode of it
// or of each file in it); "" when it does not exist.
std::string source_stamp(const std::string& path);
// The same, of a file as it was when mapped.
std::string source_stamp(const MappedFileIdentity& file);

// What names an entry.
struct CacheEntryKey {
  std::string kind;    // the start of its files' names: "weights", "packed"
  std::string what;    // how `loom cache` describes it: "quantized to q4_k_m"
  std::string source;  // the absolute path of the file or folder it is made from
  std::string stamp;   // source_stamp of that source when it was read
  std::string key;     // everything else its bytes depend on (recipe, plan, layout format)
};

// dir/<kind>-<hash>: the entry's files are this plus an extension of the user's.
std::string cache_entry_base(const std::string& dir, const CacheEntryKey& key);

// Whether the entry's manifest is there and names this key; if so it counts as used
// now (by this process, which then never evicts it). Else why not (NotFound when
// there is none). The payload's own checks are the user's.
Status find_cache_entry(const std::string& dir, const CacheEntryKey& key);

// Writes the entry's manifest: its payload can be read from now on.
Status commit_cache_entry(const std::string& dir, const CacheEntryKey& key);

// Applies the eviction rule for `bytes` more in dir: ok when they fit, else why not
// (the caller then keeps its weights in memory). new_entry: an entry is being created,
// so entries that can never be used again are looked for even when there is room.
Status make_room_in_cache(const std::string& dir, uint64_t bytes, bool new_entry);

// An entry of the cache directory, as `loom cache` lists it.
struct CacheEntryInfo {
  std::string name;                // <kind>-<hash>
  std::vector<std::string> files;  // every file of it, temporaries included
  uint64_t bytes = 0;              // of all its files
  int64_t last_use = 0;            // seconds since the epoch
  std::string kind, what, source, loom;  // from the manifest ("" when unreadable)
  std::string problem;             // why it can never be used again; "" when it can
  bool in_progress = false;        // no manifest yet, but written within the hour
};
// Every entry of dir (also files of older loom versions, listed as problems), by name.
std::vector<CacheEntryInfo> list_cache_entries(const std::string& dir);
// Removes an entry's files, the manifest first; false (and why) when one cannot be.
bool remove_cache_entry(const CacheEntryInfo& entry, std::string* why);

}  // namespace loom
