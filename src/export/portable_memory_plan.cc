// Ahead-of-time memory planning for portable programs: every arena tensor lives
// from the op that writes it (inputs: from the start) to the last op that reads
// it (outputs: to the end); first-fit placement in a free list reuses the
// memory of tensors that are dead. An op's outputs never share memory with its
// inputs: a tensor is freed only after the op that reads it last.
#include <algorithm>
#include <map>

#include "loom/export/portable_program.h"

namespace loom::exporting {
namespace {

uint64_t tensor_bytes(const PortableProgram& p, const PortableTensor& t) {
  const int64_t rows = t.row_kind == PortableRows::kFixed ? t.rows : p.max_tokens;
  return static_cast<uint64_t>(rows * t.cols) * 4;
}

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

class FreeList {
 public:
  uint64_t allocate(uint64_t size) {
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->second >= size) {
        const uint64_t off = it->first, left = it->second - size;
        free_.erase(it);
        if (left) free_[off + size] = left;
        return off;
      }
    // Grow the arena, reusing a free block that ends at its top.
    uint64_t off = end_;
    if (!free_.empty()) {
      auto last = std::prev(free_.end());
      if (last->first + last->second == end_) {
        off = last->first;
        free_.erase(last);
      }
    }
    end_ = off + size;
    return off;
  }
  void release(uint64_t off, uint64_t size) {
    auto it = free_.emplace(off, size).first;
    if (auto next = std::next(it); next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }
  uint64_t end() const { return end_; }

 private:
  std::map<uint64_t, uint64_t> free_;  // offset → size
  uint64_t end_ = 0;
};

}  // namespace

Status plan_memory(PortableProgram& p) {
  const int n_ops = static_cast<int>(p.ops.size());
  const uint64_t align = std::max<uint64_t>(p.arena_alignment, 4);
  std::vector<int> last_use(p.tensors.size(), -1);
  std::vector<bool> produced(p.tensors.size(), false);
  for (int i = 0; i < n_ops; ++i)
    for (int t : p.ops[static_cast<size_t>(i)].inputs)
      if (t >= 0) last_use[static_cast<size_t>(t)] = i;
  for (const auto& [name, t] : p.outputs) last_use[static_cast<size_t>(t)] = n_ops;
  FreeList arena;
  std::vector<std::vector<int>> dies_after(static_cast<size_t>(n_ops) + 1);
  p.unplanned_bytes = 0;
  auto place = [&](int t, int at) {
    PortableTensor& x = p.tensors[static_cast<size_t>(t)];
    const uint64_t size = round_up(tensor_bytes(p, x), align);
    x.offset = arena.allocate(size);
    p.unplanned_bytes += size;
    produced[static_cast<size_t>(t)] = true;
    // A tensor nobody reads is released right after the op that writes it.
    dies_after[static_cast<size_t>(std::max(last_use[static_cast<size_t>(t)], at))].push_back(t);
  };
  for (const auto& [name, t] : p.inputs) {
    if (p.tensors[static_cast<size_t>(t)].is_weight) return invalid_argument("plan_memory: input '" + name + "' is a weight");
    place(t, 0);
  }
  for (int i = 0; i < n_ops; ++i) {
    const PortableOp& op = p.ops[static_cast<size_t>(i)];
    for (int t : op.inputs)
      if (t >= 0 && !p.tensors[static_cast<size_t>(t)].is_weight && !produced[static_cast<size_t>(t)])
        return internal_error("plan_memory: op " + std::to_string(i) + " (" + op.op + ") reads tensor '" +
                              p.tensors[static_cast<size_t>(t)].name + "' before anything writes it");
    for (int t : op.outputs) {
      if (produced[static_cast<size_t>(t)])
        return internal_error("plan_memory: tensor '" + p.tensors[static_cast<size_t>(t)].name + "' is written twice");
      place(t, i);
    }
    for (int t : dies_after[static_cast<size_t>(i)])
      arena.release(p.tensors[static_cast<size_t>(t)].offset, round_up(tensor_bytes(p, p.tensors[static_cast<size_t>(t)]), align));
  }
  p.arena_bytes = arena.end();
  return Status::Ok();
}

}  // namespace loom::exporting
