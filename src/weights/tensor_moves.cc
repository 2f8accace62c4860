#include "loom/weights/tensor_moves.h"

#include <cstring>
#include <string>

#include "loom/core/status.h"
#include "loom/core/thread_pool.h"

namespace loom {
namespace {

// Below this many bytes a move is cheaper inline than dispatching to the pool.
constexpr int64_t kParallelBytes = int64_t{1} << 20;

[[noreturn]] void fail(const std::string& what) { throw Error(invalid_argument(what)); }

std::string shapes_of(const std::vector<Tensor>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + ts[i].describe();
  return s;
}

int64_t prod(const Shape& s, int begin, int end) {
  int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= s[i];
  return n;
}

void parallel_rows(int64_t rows, int64_t bytes, const std::function<void(int64_t, int64_t)>& fn) {
  if (bytes < kParallelBytes || rows < 2) {
    fn(0, rows);
    return;
  }
  ThreadPool::global().parallel_for(rows, [&](int64_t b, int64_t e, int) { fn(b, e); });
}

// `outer` rows of `run` bytes: src row o at src + o*src_stride → dst + o*dst_stride.
void copy_runs(const uint8_t* src, int64_t src_stride, uint8_t* dst, int64_t dst_stride, int64_t outer,
               int64_t run) {
  if (run == 0 || outer == 0) return;
  if (src_stride == run && dst_stride == run) {  // one contiguous block
    parallel_rows(outer, outer * run, [&](int64_t b, int64_t e) {
      std::memcpy(dst + b * run, src + b * run, static_cast<size_t>((e - b) * run));
    });
    return;
  }
  parallel_rows(outer, outer * run, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) std::memcpy(dst + o * dst_stride, src + o * src_stride, static_cast<size_t>(run));
  });
}

// A view of bytes [offset, offset + nbytes(shape)) of a contiguous tensor.
Tensor view_range(const Tensor& t, int64_t elem_offset, Shape shape) {
  const int64_t n = shape_numel(shape);
  if (t.numel() == 0 || n == 0) return Tensor::zeros(t.dtype(), std::move(shape));
  return t.reshape({t.numel()}).slice_rows(elem_offset, elem_offset + n).reshape(std::move(shape));
}

}  // namespace

int normalize_dim(int dim, int rank) {
  const int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank)
    fail("dimension " + std::to_string(dim) + " out of range for rank " + std::to_string(rank));
  return d;
}

Tensor concatenate(const std::vector<Tensor>& tensors, int dim) {
  if (tensors.empty()) fail("concatenate: no tensors");
  const Tensor& first = tensors[0];
  const int d = normalize_dim(dim, first.rank());
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (const Tensor& t : tensors) {
    bool same = t.dtype() == first.dtype() && t.rank() == first.rank();
    for (int i = 0; same && i < first.rank(); ++i) same = i == d || t.shape()[i] == first.shape()[i];
    if (!same) fail("concatenate along dim " + std::to_string(dim) + ": incompatible tensors " + shapes_of(tensors));
    out_shape[d] += t.shape()[d];
  }
  if (dtype_is_quantized(first.dtype()) && d == first.rank() - 1)
    fail("concatenate " + shapes_of(tensors) + ": along the quantized (last) dimension, which would cut blocks");
  Tensor out = Tensor::empty(first.dtype(), out_shape);
  const int64_t outer = prod(out_shape, 0, d);
  // Bytes of one slice below dim d; whole rows of blocks for a quantized type.
  const int64_t inner = static_cast<int64_t>(dtype_bytes(first.dtype(), prod(out_shape, d + 1, first.rank())));
  const int64_t out_row = out_shape[d] * inner;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    const int64_t run = t.shape()[d] * inner;
    copy_runs(static_cast<const uint8_t*>(t.data()), run, static_cast<uint8_t*>(out.data()) + offset, out_row, outer,
              run);
    offset += run;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int dim) {
  const int d = normalize_dim(dim, t.rank());
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split " + t.describe() + ": negative size");
    total += s;
  }
  if (total != t.shape()[d])
    fail("split " + t.describe() + " along dim " + std::to_string(dim) + ": sizes sum to " + std::to_string(total));
  if (dtype_is_quantized(t.dtype()) && d == t.rank() - 1)
    fail("split " + t.describe() + ": along the quantized (last) dimension, which would cut blocks");
  const int64_t outer = prod(t.shape(), 0, d);
  const int64_t inner_elems = prod(t.shape(), d + 1, t.rank());
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    Shape shape = t.shape();
    shape[d] = s;
    if (outer == 1) {
      out.push_back(view_range(t, start * inner_elems, std::move(shape)));  // contiguous: no copy
    } else {
      Tensor piece = Tensor::empty(t.dtype(), std::move(shape));
      const auto bytes = [&t](int64_t elems) { return static_cast<int64_t>(dtype_bytes(t.dtype(), elems)); };
      const int64_t run = bytes(s * inner_elems);
      copy_runs(static_cast<const uint8_t*>(t.data()) + bytes(start * inner_elems), bytes(t.shape()[d] * inner_elems),
                static_cast<uint8_t*>(piece.data()), run, outer, run);
      out.push_back(std::move(piece));
    }
    start += s;
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  if (tensors.empty()) fail("stack: no tensors");
  const Tensor& first = tensors[0];
  for (const Tensor& t : tensors)
    if (t.dtype() != first.dtype() || t.shape() != first.shape()) fail("stack: unequal tensors " + shapes_of(tensors));
  const int d = normalize_dim(dim, first.rank() + 1);
  std::vector<Tensor> expanded;
  expanded.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    Shape s = t.shape();
    s.insert(s.begin() + d, 1);
    expanded.push_back(t.reshape(std::move(s)));
  }
  return concatenate(expanded, d);
}

std::vector<Tensor> unstack(const Tensor& t, int dim) {
  const int d = normalize_dim(dim, t.rank());
  std::vector<Tensor> parts = split(t, std::vector<int64_t>(static_cast<size_t>(t.shape()[d]), 1), d);
  for (Tensor& p : parts) {
    Shape s = p.shape();
    s.erase(s.begin() + d);
    p = p.reshape(std::move(s));
  }
  return parts;
}

namespace {

template <typename T>
void transpose_elems(const uint8_t* src, uint8_t* dst, int64_t row_begin, int64_t row_end, int64_t n0, int64_t B,
                     int64_t n1) {
  // Output rows r = a*n1 + i1 hold in[a, :, b, i1]. Square tiles of kTile rows ×
  // kTile columns keep both the strided reads and the writes inside L1.
  constexpr int64_t kTile = 64 / static_cast<int64_t>(sizeof(T)) < 16 ? 16 : 64 / static_cast<int64_t>(sizeof(T));
  const T* in = reinterpret_cast<const T*>(src);
  T* out = reinterpret_cast<T*>(dst);
  int64_t in_base[kTile];
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kTile) {
    const int64_t nr = std::min(kTile, row_end - r0);
    for (int64_t k = 0; k < nr; ++k) {
      const int64_t a = (r0 + k) / n1, i1 = (r0 + k) % n1;
      in_base[k] = a * n0 * B * n1 + i1;
    }
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c0 = 0; c0 < n0; c0 += kTile) {
        const int64_t nc = std::min(kTile, n0 - c0);
        for (int64_t i0 = c0; i0 < c0 + nc; ++i0) {
          const int64_t in_off = (i0 * B + b) * n1;
          T* o = out + (r0 * B + b) * n0 + i0;
          for (int64_t k = 0; k < nr; ++k) o[k * B * n0] = in[in_base[k] + in_off];
        }
      }
  }
}

}  // namespace

Tensor transpose(const Tensor& t, int d0, int d1) {
  int a0 = normalize_dim(d0, t.rank()), a1 = normalize_dim(d1, t.rank());
  if (a0 > a1) std::swap(a0, a1);
  Shape out_shape = t.shape();
  std::swap(out_shape[a0], out_shape[a1]);
  Tensor out = Tensor::empty(t.dtype(), out_shape);
  if (a0 == a1 || t.numel() == 0) {
    if (t.numel()) std::memcpy(out.data(), t.data(), t.nbytes());
    return out;
  }
  const Shape& s = t.shape();
  if (dtype_is_quantized(t.dtype()))
    fail("transpose " + t.describe() + ": a quantized tensor's blocks run along its last dimension and cannot move");
  const int64_t A = prod(s, 0, a0), n0 = s[a0], B = prod(s, a0 + 1, a1), n1 = s[a1];
  const int64_t es = static_cast<int64_t>(dtype_size(t.dtype()));
  const int64_t run = prod(s, a1 + 1, t.rank()) * es;  // contiguous bytes moved together
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  const int64_t rows = A * n1;
  parallel_rows(rows, static_cast<int64_t>(t.nbytes()), [&](int64_t rb, int64_t re) {
    switch (run) {
      case 1: return transpose_elems<uint8_t>(src, dst, rb, re, n0, B, n1);
      case 2: return transpose_elems<uint16_t>(src, dst, rb, re, n0, B, n1);
      case 4: return transpose_elems<uint32_t>(src, dst, rb, re, n0, B, n1);
      case 8: return transpose_elems<uint64_t>(src, dst, rb, re, n0, B, n1);
      default:
        for (int64_t r = rb; r < re; ++r) {
          const int64_t a = r / n1, i1 = r % n1;
          for (int64_t b = 0; b < B; ++b)
            for (int64_t i0 = 0; i0 < n0; ++i0)
              std::memcpy(dst + (((r * B) + b) * n0 + i0) * run, src + (((a * n0 + i0) * B + b) * n1 + i1) * run,
                          static_cast<size_t>(run));
        }
    }
  });
  return out;
}

Tensor permute_for_rope(const Tensor& t, int64_t n_heads, int64_t head_dim, bool inverse) {
  if (t.rank() < 1 || n_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0 || t.shape()[0] != n_heads * head_dim)
    fail("permute_for_rope: " + t.describe() + " is not " + std::to_string(n_heads) + " heads of an even head_dim " +
         std::to_string(head_dim));
  Tensor out = Tensor::empty(t.dtype(), t.shape());
  const int64_t rows = t.shape()[0];
  const int64_t row_bytes = rows == 0 ? 0 : static_cast<int64_t>(t.nbytes()) / rows;
  const int64_t half = head_dim / 2;
  const auto* src = static_cast<const uint8_t*>(t.data());
  auto* dst = static_cast<uint8_t*>(out.data());
  parallel_rows(rows, static_cast<int64_t>(t.nbytes()), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const int64_t h = r / head_dim, k = r % head_dim;
      // Interleaved row 2i+j ↔ half-split row j*half + i within a head.
      const int64_t interleaved = h * head_dim + k, i = k / 2, j = k % 2;
      const int64_t split_row = h * head_dim + j * half + i;
      if (!inverse)
        std::memcpy(dst + split_row * row_bytes, src + interleaved * row_bytes, static_cast<size_t>(row_bytes));
      else
        std::memcpy(dst + interleaved * row_bytes, src + split_row * row_bytes, static_cast<size_t>(row_bytes));
    }
  });
  return out;
}

}  // namespace loom
