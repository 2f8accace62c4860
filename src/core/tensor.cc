#include "loom/core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <sstream>

#include "loom/core/thread_pool.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "loom/core/status.h"

namespace loom {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::string shape_to_string(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

std::shared_ptr<void> allocate_aligned(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

std::shared_ptr<void> allocate_streamed(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes < kHuge) return allocate_aligned(bytes);
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  void* p = std::aligned_alloc(kHuge, rounded);
  if (!p) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  // Huge pages only where they are full: a 2.4 MB tensor rounded up to 4 MB of
  // huge pages held 1.6 MB it never used (150 MB over the 1B model's interleaved
  // Q4_0 weights); the tail is touched page by page.
  (void)madvise(p, bytes / kHuge * kHuge, MADV_HUGEPAGE);
#endif
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.defined_ = true;
  // Large tensors (a checkpoint's matrices made at load) in 2 MB pages.
  t.storage_ = allocate_streamed(t.nbytes());
  t.data_ = t.storage_.get();
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> keep_alive) {
  Tensor t;
  t.data_ = data;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.defined_ = true;
  t.storage_ = std::move(keep_alive);
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& values, Shape shape) {
  Tensor t = empty(DType::kF32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw Error(invalid_argument("Tensor::from_f32: " + std::to_string(values.size()) +
                                " values for shape " + shape_to_string(t.shape_)));
  std::memcpy(t.data_, values.data(), t.nbytes());
  return t;
}

Tensor Tensor::from_i32(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = empty(DType::kI32, std::move(shape));
  if (static_cast<int64_t>(values.size()) != t.numel())
    throw Error(invalid_argument("Tensor::from_i32: " + std::to_string(values.size()) +
                                " values for shape " + shape_to_string(t.shape_)));
  std::memcpy(t.data_, values.data(), t.nbytes());
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape_numel(shape) != numel())
    throw Error(invalid_argument("reshape " + describe() + " to " + shape_to_string(shape)));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  if (rank() == 0 || begin < 0 || end > shape_[0] || begin > end)
    throw Error(out_of_range("slice_rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                             ") of " + describe()));
  Tensor t = *this;
  const int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  t.shape_[0] = end - begin;
  t.data_ = static_cast<char*>(data_) + dtype_bytes(dtype_, begin * row);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  Tensor t = empty(dtype, shape_);
  convert_into(t);
  return t;
}

void Tensor::convert_into(const Tensor& t) const {
  if (t.shape_ != shape_) {
    throw Error(invalid_argument("convert_into: " + describe() + " into " + t.describe() + ", another shape"));
  }
  const DType dtype = t.dtype_;
  // Rows on every thread when there are many (quantizing a model's matrices at load
  // was a single thread's 26 s): no block crosses a row, so the bytes are the same.
  const int64_t n = numel(), cols = rank() >= 2 ? dim(-1) : n, rows = cols > 0 ? n / cols : 0;
  const bool whole_blocks = cols % dtype_block_elements(dtype_) == 0 && cols % dtype_block_elements(dtype) == 0;
  if (n < (int64_t{1} << 18) || rows < 2 || !whole_blocks) {
    convert_elements(data_, dtype_, t.data_, dtype, static_cast<size_t>(n));
    return;
  }
  const size_t src_row = dtype_bytes(dtype_, cols), dst_row = dtype_bytes(dtype, cols);
  ThreadPool::global().parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    convert_elements(static_cast<const char*>(data_) + src_row * static_cast<size_t>(r0), dtype_,
                     static_cast<char*>(t.data_) + dst_row * static_cast<size_t>(r0), dtype,
                     static_cast<size_t>((r1 - r0) * cols));
  });
}

Tensor Tensor::clone() const { return to(dtype_); }

std::vector<float> Tensor::to_f32_vector() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  convert_elements(data_, dtype_, out.data(), DType::kF32, out.size());
  return out;
}

std::string Tensor::describe() const { return std::string(dtype_name(dtype_)) + shape_to_string(shape_); }

}  // namespace loom
