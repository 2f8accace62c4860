// The one tensor type: a dtype, a row-major shape and shared storage. Storage may
// be owned (64-byte aligned heap), borrowed from an mmap'd checkpoint (kept alive
// by a keep-alive handle), or a slice of a caller-owned arena.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/dtype.h"

namespace loom {

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& s);
std::string shape_to_string(const Shape& s);  // "[2, 3]"

class Tensor {
 public:
  Tensor() = default;

  // Owned, uninitialised / zeroed storage.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // Wraps memory that someone else owns; `keep_alive` (if any) is held as long as
  // any view of this tensor lives.
  static Tensor wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> keep_alive = nullptr);
  static Tensor from_f32(const std::vector<float>& values, Shape shape);
  static Tensor from_i32(const std::vector<int32_t>& values, Shape shape);

  bool defined() const { return defined_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const { return shape_[i < 0 ? i + rank() : i]; }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return dtype_bytes(dtype_, numel()); }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const { return static_cast<T*>(data_); }

  // Views sharing storage.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of dimension 0.
  Tensor slice_rows(int64_t begin, int64_t end) const;

  // Copies.
  Tensor to(DType dtype) const;
  // to(out.dtype()), written into out's storage (a mapped file's, say); out must have
  // this tensor's shape (InvalidArgument otherwise).
  void convert_into(const Tensor& out) const;
  Tensor clone() const;
  std::vector<float> to_f32_vector() const;
  std::string describe() const;  // "BF16[2, 3]"

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<void> storage_;
  bool defined_ = false;
};

// 64-byte aligned allocation that frees itself.
std::shared_ptr<void> allocate_aligned(size_t bytes);

// For buffers read start to end over and over (packed weights, KV caches) and large
// tensors (Tensor::empty): from 2 MB up, 2 MB-aligned and advised for transparent huge
// pages, so reading them misses the TLB far less, the hardware prefetcher is not stopped
// at every 4 KB boundary, and first touching them takes a fault per 2 MB (1.3 GB took
// 2.2 s against 4.3-5.7 s in 4 KB pages on a Zen 5 VM). Smaller ones are
// allocate_aligned. Advisory: without transparent huge pages it is plain aligned memory.
std::shared_ptr<void> allocate_streamed(size_t bytes);

}  // namespace loom
