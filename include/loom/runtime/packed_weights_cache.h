// Weights packed into the kernels' layouts, cached on disk and mapped on later
// loads. Packing copies every matrix of a bf16, f16 or f32 checkpoint into panels,
// and every Q4_0/Q4_K/Q6_K/Q8_0 matrix into groups of rows, into fresh memory: on
// the 1B bf16 file on a Zen 5 VM, 35-60% of such a load was the kernel zeroing
// those fresh pages, and the load took twice llama.cpp's, which reads its file's
// pages from the page cache as they are. So the first load packs straight into a
// file of the cache directory (core/cache_dir.h), and later loads map that file:
// its pages are page-cache pages, already in memory, resident once and shared
// between processes.
//
// Decode streams every weight each step, and reads 4 KB pages a quarter slower
// than 2 MB ones (TLB misses, nested paging in VMs). The file is mapped at
// addresses that agree with its offsets modulo 2 MB, so that a kernel with large
// page-cache folios maps it with 2 MB pages (smaps' FilePmdMapped tells). Where
// the first region it writes comes in 4 KB pages, a process packs in memory
// instead; where a file written elsewhere is read in 4 KB pages, its bytes are
// copied into memory, which still saves the packing.
//
// A cache file belongs to one checkpoint file (a GGUF file, a safetensors shard,
// or a file of weights cached at load): packed-<hash>.bin holds the packed bytes,
// packed-<hash>.idx one record per packed tensor. The hash covers loom's version,
// the layout format, and the checkpoint file's absolute path, device, inode, size
// and modification time, so a changed file gets a new cache file (which replaces
// the old one). A record names its tensor by offset in the checkpoint file,
// dtype, shape and layout, and carries a hash of its packed bytes, checked each
// time they are read: a record whose bytes do not match is packed again.
// Processes that pack the same file at once append under a file lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/runtime/cpu/matmul.h"

namespace loom::runtime {

// The packed copy of weight (+ bias): from the cache when an earlier load packed it,
// else packed into the cache when weight is a view of a mapped checkpoint file and
// the cache directory is writable (and mapped in 2 MB pages), else packed in memory.
// A cache that cannot be used is a warning, never an error.
Result<cpu::PackedLinear> pack_through_cache(const Tensor& weight, const Tensor* bias);

// A packed-weights file of the cache directory, as `loom cache` lists it.
struct PackedWeightsFile {
  std::string path;   // the .bin file (its .idx is removed with it)
  uint64_t bytes = 0;  // both files
  std::string checkpoint_file;  // what it was packed from ("" when unreadable)
  size_t tensors = 0;
  std::string problem;  // why it cannot be used ("" when it can)
};
std::vector<PackedWeightsFile> list_packed_weights_cache(const std::string& dir);
// Removes a listed file and its index; false (and why) when it cannot.
bool remove_packed_weights_file(const PackedWeightsFile& file, std::string* why);

}  // namespace loom::runtime
