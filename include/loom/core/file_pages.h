// Pages of read-only file mappings that a copy has replaced. A checkpoint's
// mapping registers its range; whoever copies a tensor into its own layout (the
// packed matmul weights) hands the source range back, and those pages leave the
// process's resident set. They stay in the page cache and fault back in from it
// if the view is read again, so releasing is never destructive; ranges outside
// a registered file mapping are left alone (anonymous memory would be zeroed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace loom {

// Which file a mapping shows, as it was when mapped: a copy made from its bytes
// can be cached under this name (runtime/packed_weights_cache.h).
struct MappedFileIdentity {
  std::string path;  // absolute; "" when unknown
  uint64_t device = 0, inode = 0, size = 0;
  int64_t mtime_ns = 0;
};

void register_file_mapping(const void* begin, size_t bytes, MappedFileIdentity file = {});
void unregister_file_mapping(const void* begin);

// Drops the whole pages inside [p, p + bytes) when they lie in a registered
// mapping; returns the bytes released (0 if none, or while set_keep_file_pages).
size_t release_file_pages(const void* p, size_t bytes);
// true: release_file_pages keeps every page from now on, for benchmarks measuring what
// releasing them saves (`loom bench --keep-mapped-pages`).
void set_keep_file_pages(bool keep);

// Maps the pages [p, p + bytes) touches, of any mapping, in one call before a copy
// reads them all or writes them all (MADV_POPULATE_READ / MADV_POPULATE_WRITE): a
// fault per page cost ~2 µs in a VM (1 s over a 2.3 GB file), populating them ~0.05 s.
// Best effort: a kernel without it (before 5.14) leaves the pages to fault in.
void populate_pages(const void* p, size_t bytes, bool for_writing);

// populate_pages for reading, when [p, p + bytes) lies in a registered mapping.
void prefault_file_pages(const void* p, size_t bytes);

// Reads the pages of [p, p + bytes), when it lies in a registered mapping, without
// the read-around a fault otherwise starts (MADV_RANDOM): a small tensor (a norm's
// weight) among large ones that are not read from this mapping (packed copies from
// the cache) would otherwise read megabytes of them from disk (read_ahead_kb: 8 MB
// on a VM here, 268 MB of a 1B checkpoint for its 33 norms).
void read_file_pages_sparsely(const void* p, size_t bytes);

// Whether [p, p + bytes) lies in a registered mapping: a copy of it can be the
// only resident one.
bool in_file_mapping(const void* p, size_t bytes);

// The file and byte offset [p, p + bytes) was mapped from, when it lies in a
// registered mapping whose file is known.
struct FileSpan {
  MappedFileIdentity file;
  uint64_t offset = 0;
};
std::optional<FileSpan> file_span(const void* p, size_t bytes);

}  // namespace loom
