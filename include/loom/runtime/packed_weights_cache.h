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
// A cache entry (core/cache_dir.h: naming, validation against the checkpoint
// file, eviction and listing are the store's) belongs to one checkpoint file (a
// GGUF file, a safetensors shard, or a file of weights cached at load): its .bin
// file holds the packed bytes, its .idx file one record per packed tensor. The
// entry's key is the checkpoint file's absolute path, device, inode, size and
// modification time and the layout format, so a changed file gets a new entry (and
// the old one is evicted as one whose source changed). A record names its tensor
// by offset in the checkpoint file, dtype, shape and layout, and carries a hash of
// its packed bytes, checked each time they are read: a record whose bytes do not
// match is packed again. Processes that pack the same file at once append under a
// file lock; every region appended goes through the cache's eviction rule first.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/cache_dir.h"
#include "loom/core/status.h"
#include "loom/core/tensor.h"
#include "loom/runtime/cpu/matmul.h"

namespace loom::runtime {

// The packed copy of weight (+ bias): from the cache when an earlier load packed it,
// else packed into the cache when weight is a view of a mapped checkpoint file and
// the cache directory is writable (and mapped in 2 MB pages), else packed in memory.
// A cache that cannot be used is a warning, never an error.
Result<cpu::PackedLinear> pack_through_cache(const Tensor& weight, const Tensor* bias);

// The tensors a packed-weights entry of the cache holds (`loom cache` lists them).
size_t packed_weights_in(const CacheEntryInfo& entry);

}  // namespace loom::runtime
