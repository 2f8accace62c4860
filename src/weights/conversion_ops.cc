#include "loom/weights/conversion_ops.h"

#include <algorithm>
#include <sstream>

#include "loom/core/file_pages.h"
#include "loom/weights/mxfp4_blocks.h"
#include "loom/weights/tensor_moves.h"

namespace loom {
namespace {

std::string join_sizes(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string slots_suffix(const std::vector<int>& slots) {
  if (slots.empty()) return "";
  std::string s = ", slots=[";
  for (size_t i = 0; i < slots.size(); ++i) s += (i ? ", " : "") + std::to_string(slots[i]);
  return s + "]";
}

Status bad(const ConversionOp& op, const std::string& why) { return invalid_argument(op.describe() + ": " + why); }

std::string bundle_string(const ShapeBundle& b) {
  std::string s = "{";
  for (size_t i = 0; i < b.size(); ++i) {
    s += (i ? "; " : "") + std::string(dtype_name(b[i].dtype));
    for (size_t k = 0; k < b[i].items.size(); ++k) {
      if (k) s += ',';
      s += shape_to_string(b[i].items[k]);
    }
    if (b[i].items.empty()) s += "(empty)";
  }
  return s + "}";
}

bool norm(int dim, int rank, int* out) {
  const int d = dim < 0 ? dim + rank : dim;
  if (d < 0 || d >= rank) return false;
  *out = d;
  return true;
}

bool inside(const Tensor& t, const Tensor& base) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  const auto* b = static_cast<const uint8_t*>(base.data());
  return t.nbytes() > 0 && p >= b && p + t.nbytes() <= b + base.nbytes();
}

}  // namespace

ConversionOp ConversionOp::on_slots(std::vector<int> s) const {
  ConversionOp op = *this;
  op.slots = std::move(s);
  return op;
}

bool ConversionOp::applies_to(int slot) const {
  return slots.empty() || std::find(slots.begin(), slots.end(), slot) != slots.end();
}

ConversionOp ConversionOp::reverse() const {
  ConversionOp r = *this;
  switch (kind) {
    case ConversionOpKind::kConcatenate: r.kind = ConversionOpKind::kChunk; break;
    case ConversionOpKind::kChunk: r.kind = ConversionOpKind::kConcatenate; break;
    case ConversionOpKind::kMergeModulelist: r.kind = ConversionOpKind::kSplitModulelist; break;
    case ConversionOpKind::kSplitModulelist: r.kind = ConversionOpKind::kMergeModulelist; break;
    case ConversionOpKind::kTranspose: break;  // swapping the same two dims undoes itself
    case ConversionOpKind::kPermuteForRope: r.inverse = !inverse; break;
    case ConversionOpKind::kAddScalar: r.scalar = -scalar; break;
    case ConversionOpKind::kMxfp4FromBlocks: r.inverse = !inverse; break;
  }
  return r;
}

std::string ConversionOp::describe() const {
  switch (kind) {
    case ConversionOpKind::kConcatenate:
      return "Concatenate(dim=" + std::to_string(dim) + ")";
    case ConversionOpKind::kChunk:
      return "Chunk(dim=" + std::to_string(dim) + (sizes.empty() ? "" : ", sizes=" + join_sizes(sizes)) + ")";
    case ConversionOpKind::kMergeModulelist:
      return "MergeModulelist(dim=" + std::to_string(dim) + ")";
    case ConversionOpKind::kSplitModulelist:
      return "SplitModulelist(dim=" + std::to_string(dim) + ")";
    case ConversionOpKind::kTranspose:
      return "Transpose(" + std::to_string(dim) + ", " + std::to_string(dim1) + (check_dims ? ", check_dims" : "") +
             slots_suffix(slots) + ")";
    case ConversionOpKind::kPermuteForRope:
      return std::string(inverse ? "UnpermuteForRope" : "PermuteForRope") + "(n_heads=" + std::to_string(n_heads) +
             ", head_dim=" + std::to_string(head_dim) + slots_suffix(slots) + ")";
    case ConversionOpKind::kAddScalar: {
      std::ostringstream v;
      v << scalar;
      return "AddScalar(" + v.str() + slots_suffix(slots) + ")";
    }
    case ConversionOpKind::kMxfp4FromBlocks:
      return inverse ? "Mxfp4ToBlocks()" : "Mxfp4FromBlocks()";
  }
  return "?";
}

namespace {
ConversionOp make(ConversionOpKind kind, int dim) {
  ConversionOp op;
  op.kind = kind;
  op.dim = dim;
  return op;
}
}  // namespace

ConversionOp Concatenate(int dim) { return make(ConversionOpKind::kConcatenate, dim); }
ConversionOp Chunk(int dim, std::vector<int64_t> sizes) {
  ConversionOp op = make(ConversionOpKind::kChunk, dim);
  op.sizes = std::move(sizes);
  return op;
}
ConversionOp MergeModulelist(int dim) { return make(ConversionOpKind::kMergeModulelist, dim); }
ConversionOp SplitModulelist(int dim) { return make(ConversionOpKind::kSplitModulelist, dim); }
ConversionOp Transpose(int dim0, int dim1, bool check_dims) {
  ConversionOp op = make(ConversionOpKind::kTranspose, dim0);
  op.dim1 = dim1;
  op.check_dims = check_dims;
  return op;
}
ConversionOp PermuteForRope(int64_t n_heads, int64_t head_dim) {
  ConversionOp op = make(ConversionOpKind::kPermuteForRope, 0);
  op.n_heads = n_heads;
  op.head_dim = head_dim;
  return op;
}

ConversionOp Mxfp4FromBlocks() { return make(ConversionOpKind::kMxfp4FromBlocks, 0); }

ConversionOp AddScalar(double value) {
  ConversionOp op = make(ConversionOpKind::kAddScalar, 0);
  op.scalar = value;
  return op;
}

std::vector<ConversionOp> reverse_chain(const std::vector<ConversionOp>& ops) {
  std::vector<ConversionOp> r;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it) r.push_back(it->reverse());
  return r;
}

std::string describe_chain(const std::vector<ConversionOp>& ops) {
  if (ops.empty()) return "identity";
  std::string s;
  for (size_t i = 0; i < ops.size(); ++i) s += (i ? " → " : "") + ops[i].describe();
  return s;
}

Result<ShapeBundle> infer_shapes(const ConversionOp& op, const ShapeBundle& in) {
  const auto single_items = [&](const char* what) -> Status {
    for (const ShapeSlot& s : in)
      if (s.items.size() != 1)
        return bad(op, std::string(what) + " expects one tensor per slot, got " + bundle_string(in));
    return Status::Ok();
  };
  ShapeBundle out;
  switch (op.kind) {
    case ConversionOpKind::kConcatenate: {
      if (in.empty()) return bad(op, "no input");
      LOOM_RETURN_IF_ERROR(single_items("Concatenate"));
      const Shape& first = in[0].items[0];
      int d;
      if (!norm(op.dim, static_cast<int>(first.size()), &d)) return bad(op, "dim out of range for " + bundle_string(in));
      Shape r = first;
      r[d] = 0;
      for (const ShapeSlot& s : in) {
        const Shape& sh = s.items[0];
        bool ok = s.dtype == in[0].dtype && sh.size() == first.size();
        for (size_t i = 0; ok && i < sh.size(); ++i) ok = static_cast<int>(i) == d || sh[i] == first[i];
        if (!ok) return bad(op, "incompatible inputs " + bundle_string(in));
        r[d] += sh[d];
      }
      out.push_back({{r}, in[0].dtype});
      return out;
    }
    case ConversionOpKind::kChunk: {
      if (in.size() != 1) return bad(op, "expects one input slot, got " + bundle_string(in));
      LOOM_RETURN_IF_ERROR(single_items("Chunk"));
      const Shape& sh = in[0].items[0];
      int d;
      if (!norm(op.dim, static_cast<int>(sh.size()), &d)) return bad(op, "dim out of range for " + bundle_string(in));
      if (op.sizes.empty()) return bad(op, "split sizes unknown");
      int64_t total = 0;
      for (int64_t s : op.sizes) total += s;
      if (total != sh[d])
        return bad(op, "sizes " + join_sizes(op.sizes) + " sum to " + std::to_string(total) + " but " +
                           shape_to_string(sh) + " has " + std::to_string(sh[d]) + " along dim " + std::to_string(op.dim));
      for (int64_t s : op.sizes) {
        Shape p = sh;
        p[d] = s;
        out.push_back({{p}, in[0].dtype});
      }
      return out;
    }
    case ConversionOpKind::kMergeModulelist: {
      for (const ShapeSlot& s : in) {
        if (s.items.empty()) return bad(op, "empty list in " + bundle_string(in));
        for (const Shape& sh : s.items)
          if (sh != s.items[0]) return bad(op, "list items of different shapes " + bundle_string(in));
        int d;
        if (!norm(op.dim, static_cast<int>(s.items[0].size()) + 1, &d))
          return bad(op, "dim out of range for " + bundle_string(in));
        Shape r = s.items[0];
        r.insert(r.begin() + d, static_cast<int64_t>(s.items.size()));
        out.push_back({{r}, s.dtype});
      }
      return out;
    }
    case ConversionOpKind::kSplitModulelist: {
      LOOM_RETURN_IF_ERROR(single_items("SplitModulelist"));
      for (const ShapeSlot& s : in) {
        const Shape& sh = s.items[0];
        int d;
        if (!norm(op.dim, static_cast<int>(sh.size()), &d)) return bad(op, "dim out of range for " + bundle_string(in));
        Shape p = sh;
        p.erase(p.begin() + d);
        out.push_back({std::vector<Shape>(static_cast<size_t>(sh[d]), p), s.dtype});
      }
      return out;
    }
    case ConversionOpKind::kMxfp4FromBlocks: {
      LOOM_RETURN_IF_ERROR(single_items("Mxfp4FromBlocks"));
      if (!op.inverse) {
        if (in.size() != 2) return bad(op, "expects two slots (blocks, scales), got " + bundle_string(in));
        const Shape& b = in[0].items[0];
        const Shape& sc = in[1].items[0];
        if (in[0].dtype != DType::kU8 || in[1].dtype != DType::kU8 || b.size() < 2 || b.back() != 16 ||
            Shape(b.begin(), b.end() - 1) != sc)
          return bad(op, "needs U8 blocks [..., G, 16] and U8 scales [..., G], got " + bundle_string(in));
        Shape r(sc.begin(), sc.end() - 1);
        r.push_back(sc.back() * 32);
        out.push_back({{r}, DType::kMXFP4});
        return out;
      }
      if (in.size() != 1 || in[0].dtype != DType::kMXFP4 || in[0].items[0].empty() || in[0].items[0].back() % 32 != 0)
        return bad(op, "needs one MXFP4 tensor, got " + bundle_string(in));
      Shape sc = in[0].items[0];
      sc.back() /= 32;
      Shape b = sc;
      b.push_back(16);
      out.push_back({{b}, DType::kU8});
      out.push_back({{sc}, DType::kU8});
      return out;
    }
    case ConversionOpKind::kAddScalar: {
      for (int i : op.slots)
        if (i < 0 || i >= static_cast<int>(in.size())) return bad(op, "slot " + std::to_string(i) + " not in " + bundle_string(in));
      for (size_t i = 0; i < in.size(); ++i)
        if (op.applies_to(static_cast<int>(i)) && (!dtype_is_float(in[i].dtype) || dtype_is_quantized(in[i].dtype)))
          return bad(op, "needs float tensors, got " + bundle_string(in));
      return in;
    }
    case ConversionOpKind::kTranspose:
    case ConversionOpKind::kPermuteForRope: {
      for (int i : op.slots)
        if (i < 0 || i >= static_cast<int>(in.size())) return bad(op, "slot " + std::to_string(i) + " not in " + bundle_string(in));
      out = in;
      for (size_t i = 0; i < out.size(); ++i) {
        if (!op.applies_to(static_cast<int>(i))) continue;
        for (Shape& sh : out[i].items) {
          if (op.kind == ConversionOpKind::kTranspose) {
            int a, b;
            if (!norm(op.dim, static_cast<int>(sh.size()), &a) || !norm(op.dim1, static_cast<int>(sh.size()), &b))
              return bad(op, "dims out of range for " + bundle_string(in));
            std::swap(sh[a], sh[b]);
          } else if (sh.empty() || op.head_dim <= 0 || op.head_dim % 2 != 0 || sh[0] != op.n_heads * op.head_dim) {
            return bad(op, "needs " + std::to_string(op.n_heads) + "×" + std::to_string(op.head_dim) +
                               " rows (even head_dim), got " + bundle_string(in));
          }
        }
      }
      return out;
    }
  }
  return internal_error("unknown conversion op");
}

TensorBundle apply_op(const ConversionOp& op, const TensorBundle& in, uint64_t* materialized) {
  TensorBundle out;
  const auto count = [&](const Tensor& t, const std::vector<const Tensor*>& sources) {
    for (const Tensor* s : sources)
      if (inside(t, *s)) return;
    if (materialized) *materialized += t.nbytes();
  };
  // A source copied into a new tensor is read once: its checkpoint pages need not
  // stay resident beside the copy (they fault back in from the page cache if read).
  const auto copied_from = [](const Tensor& source) { release_file_pages(source.data(), source.nbytes()); };
  switch (op.kind) {
    case ConversionOpKind::kConcatenate: {
      std::vector<Tensor> parts;
      for (const auto& slot : in) parts.push_back(slot.at(0));
      out.push_back({concatenate(parts, op.dim)});
      count(out[0][0], {});
      for (const Tensor& p : parts) copied_from(p);
      break;
    }
    case ConversionOpKind::kChunk: {
      const Tensor& t = in.at(0).at(0);
      for (Tensor& p : split(t, op.sizes, op.dim)) {
        count(p, {&t});
        out.push_back({std::move(p)});
      }
      break;
    }
    case ConversionOpKind::kMergeModulelist:
      for (const auto& slot : in) {
        out.push_back({stack(slot, op.dim)});
        count(out.back()[0], {});
        for (const Tensor& t : slot) copied_from(t);
      }
      break;
    case ConversionOpKind::kSplitModulelist:
      for (const auto& slot : in) {
        const Tensor& t = slot.at(0);
        out.push_back(unstack(t, op.dim));
        for (const Tensor& p : out.back()) count(p, {&t});
      }
      break;
    case ConversionOpKind::kTranspose:
    case ConversionOpKind::kPermuteForRope:
      out = in;
      for (size_t i = 0; i < out.size(); ++i) {
        if (!op.applies_to(static_cast<int>(i))) continue;
        for (Tensor& t : out[i]) {
          const Tensor source = t;
          t = op.kind == ConversionOpKind::kTranspose ? transpose(t, op.dim, op.dim1)
                                                      : permute_for_rope(t, op.n_heads, op.head_dim, op.inverse);
          count(t, {});
          copied_from(source);
        }
      }
      break;
    case ConversionOpKind::kMxfp4FromBlocks:
      if (!op.inverse) {
        out.push_back({mxfp4_from_blocks(in.at(0).at(0), in.at(1).at(0))});
        count(out[0][0], {});
        copied_from(in[0][0]);
      } else {
        auto [blocks, scales] = mxfp4_to_blocks(in.at(0).at(0));
        count(blocks, {});
        count(scales, {});
        out.push_back({std::move(blocks)});
        out.push_back({std::move(scales)});
      }
      break;
    case ConversionOpKind::kAddScalar:
      out = in;
      for (size_t i = 0; i < out.size(); ++i) {
        if (!op.applies_to(static_cast<int>(i))) continue;
        for (Tensor& t : out[i]) {
          std::vector<float> v = t.to_f32_vector();
          const float add = static_cast<float>(op.scalar);
          for (float& x : v) x += add;
          Tensor sum = Tensor::from_f32(v, t.shape());
          copied_from(t);
          t = t.dtype() == DType::kF32 ? sum : sum.to(t.dtype());
          count(t, {});
        }
      }
      break;
  }
  return out;
}

}  // namespace loom
