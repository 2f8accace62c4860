#include "loom/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "loom/runtime/op_profile.h"

namespace loom::runtime {

Result<std::unique_ptr<Executor>> Executor::create(std::shared_ptr<const graph::Graph> graph, const Backend& backend,
                                                   ThreadPool* pool) {
  std::unique_ptr<Executor> ex(new Executor(std::move(graph), backend, pool ? pool : &ThreadPool::global()));
  const graph::Graph& g = *ex->graph_;
  for (const graph::Node& n : g.nodes()) {
    const OpKernel* k = backend.find(n.op);
    if (!k) return unsupported("backend '" + backend.name() + "' has no kernel for op '" + n.op + "' (" + n.scope + ")");
    ex->kernels_.push_back(k);
  }
  // Preparing packs every weight once: the bulk of load time, so nodes are
  // prepared in parallel (each prepare touches only its own node).
  const auto& nodes = g.nodes();
  ex->states_.resize(nodes.size());
  std::vector<Status> statuses(nodes.size());
  ex->pool_->parallel_for(static_cast<int64_t>(nodes.size()), [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const graph::Node& n = nodes[static_cast<size_t>(i)];
      const OpKernel* k = ex->kernels_[static_cast<size_t>(i)];
      if (!k->prepare) continue;
      auto prepared = k->prepare(g, n);
      if (!prepared.ok()) statuses[static_cast<size_t>(i)] = prepared.status().with_context("preparing " + n.op + " in " + n.scope);
      else ex->states_[static_cast<size_t>(i)] = std::move(prepared).value();
    }
  });
  for (const Status& st : statuses) LOOM_RETURN_IF_ERROR(st);
  ex->last_use_.assign(g.values().size(), -1);
  ex->is_output_.assign(g.values().size(), false);
  for (const graph::Node& n : g.nodes())
    for (graph::ValueId v : n.inputs)
      if (v != graph::kNoValue) ex->last_use_[static_cast<size_t>(v)] = n.id;
  for (const auto& [name, v] : g.outputs()) ex->is_output_[static_cast<size_t>(v)] = true;
  return ex;
}

namespace {
struct Block {
  size_t offset, size;
};
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Status Executor::run(const std::vector<std::pair<std::string, Tensor>>& inputs, graph::StepContext* step,
                     std::vector<Tensor>* outputs) {
  const graph::Graph& g = *graph_;
  const size_t nv = g.values().size();
  std::vector<Tensor> values(nv);
  std::vector<int64_t> symbol_values(g.symbols().size(), -1);

  // Bind inputs and symbols.
  for (graph::ValueId id : g.inputs()) {
    const graph::Value& v = g.value(id);
    const Tensor* t = nullptr;
    for (const auto& [name, tensor] : inputs)
      if (name == v.name) t = &tensor;
    if (!t) return invalid_argument("graph input '" + v.name + "' was not given");
    if (t->dtype() != v.dtype)
      return invalid_argument("graph input '" + v.name + "' must be " + std::string(dtype_name(v.dtype)) + ", got " +
                              t->describe());
    if (t->rank() != static_cast<int>(v.shape.size()))
      return invalid_argument("graph input '" + v.name + "' must have rank " + std::to_string(v.shape.size()) +
                              ", got " + t->describe());
    for (size_t d = 0; d < v.shape.size(); ++d) {
      const graph::Dim& dim = v.shape[d];
      const int64_t actual = t->dim(static_cast<int>(d));
      if (dim.is_static()) {
        if (dim.value != actual)
          return invalid_argument("graph input '" + v.name + "' dim " + std::to_string(d) + " must be " +
                                  std::to_string(dim.value) + ", got " + std::to_string(actual));
      } else {
        int64_t& bound = symbol_values[static_cast<size_t>(dim.symbol)];
        if (bound >= 0 && bound != actual)
          return invalid_argument("graph input '" + v.name + "': dimension '" + g.symbols()[static_cast<size_t>(dim.symbol)] +
                                  "' is " + std::to_string(actual) + " here but " + std::to_string(bound) + " elsewhere");
        bound = actual;
      }
    }
    values[static_cast<size_t>(id)] = *t;
  }
  for (const graph::Value& v : g.values())
    if (v.kind == graph::ValueKind::kParameter || v.kind == graph::ValueKind::kConstant) values[static_cast<size_t>(v.id)] = v.tensor;

  auto concrete = [&](const graph::SymShape& s, Shape* out) -> Status {
    out->clear();
    for (const graph::Dim& d : s) {
      if (d.is_static()) {
        out->push_back(d.value);
      } else {
        const int64_t b = symbol_values[static_cast<size_t>(d.symbol)];
        if (b < 0) return internal_error("symbol '" + g.symbols()[static_cast<size_t>(d.symbol)] + "' is unbound");
        out->push_back(b);
      }
    }
    return Status::Ok();
  };

  // Plan: first-fit placement of node outputs in one arena, freeing a value's
  // block after its last reader.
  const auto& nodes = g.nodes();
  std::vector<Shape> shapes(nv);
  std::vector<size_t> offsets(nv, 0);
  std::vector<Block> free_blocks;
  size_t arena_end = 0;
  std::vector<std::vector<graph::ValueId>> release_after(nodes.size());
  for (const graph::Node& n : nodes) {
    for (graph::ValueId o : n.outputs) {
      LOOM_RETURN_IF_ERROR(concrete(g.value(o).shape, &shapes[static_cast<size_t>(o)]));
      const size_t bytes = align_up(static_cast<size_t>(shape_numel(shapes[static_cast<size_t>(o)])) *
                                    dtype_size(g.value(o).dtype));
      size_t off = SIZE_MAX;
      for (size_t i = 0; i < free_blocks.size(); ++i) {
        if (free_blocks[i].size >= bytes) {
          off = free_blocks[i].offset;
          free_blocks[i].offset += bytes;
          free_blocks[i].size -= bytes;
          if (free_blocks[i].size == 0) free_blocks.erase(free_blocks.begin() + static_cast<long>(i));
          break;
        }
      }
      if (off == SIZE_MAX) {
        off = arena_end;
        arena_end += bytes;
      }
      offsets[static_cast<size_t>(o)] = off;
      const int last = last_use_[static_cast<size_t>(o)];
      if (!is_output_[static_cast<size_t>(o)]) {
        // A value nobody reads is released right after it is produced.
        release_after[static_cast<size_t>(last >= 0 ? last : n.id)].push_back(o);
      }
    }
    for (graph::ValueId r : release_after[static_cast<size_t>(n.id)]) {
      const size_t bytes = align_up(static_cast<size_t>(shape_numel(shapes[static_cast<size_t>(r)])) *
                                    dtype_size(g.value(r).dtype));
      if (bytes == 0) continue;
      free_blocks.push_back({offsets[static_cast<size_t>(r)], bytes});
      // Keep the free list sorted and merged so fragmentation stays low.
      std::sort(free_blocks.begin(), free_blocks.end(), [](const Block& a, const Block& b) { return a.offset < b.offset; });
      std::vector<Block> merged;
      for (const Block& b : free_blocks) {
        if (!merged.empty() && merged.back().offset + merged.back().size == b.offset) merged.back().size += b.size;
        else merged.push_back(b);
      }
      free_blocks = std::move(merged);
    }
  }
  if (arena_end > arena_bytes_ || !arena_) {
    arena_ = allocate_aligned(std::max<size_t>(arena_end, kAlign));
    arena_bytes_ = std::max<size_t>(arena_end, kAlign);
  }
  char* base = static_cast<char*>(arena_.get());

  for (const graph::Node& n : nodes) {
    KernelArgs args{g, n, {}, {}, step, *pool_, states_[static_cast<size_t>(n.id)].get()};
    args.in.reserve(n.inputs.size());
    for (graph::ValueId v : n.inputs) args.in.push_back(v == graph::kNoValue ? Tensor() : values[static_cast<size_t>(v)]);
    for (graph::ValueId o : n.outputs) {
      Tensor t = Tensor::wrap(base + offsets[static_cast<size_t>(o)], g.value(o).dtype, shapes[static_cast<size_t>(o)], arena_);
      values[static_cast<size_t>(o)] = t;
      args.out.push_back(t);
    }
    OpProfile& profile = OpProfile::global();
    const bool timed = profile.enabled();
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    Status st = kernels_[static_cast<size_t>(n.id)]->run(args);
    if (timed) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t rows = !args.out.empty() && args.out[0].rank() > 0 ? args.out[0].dim(0) : 1;
      profile.add(n.op, n.scope, rows, seconds);
    }
    if (!st.ok()) return st.with_context(n.op + (n.scope.empty() ? "" : " in " + n.scope));
  }
  outputs->clear();
  for (const auto& [name, v] : g.outputs()) outputs->push_back(values[static_cast<size_t>(v)]);
  return Status::Ok();
}

std::vector<std::string> Backend::ops() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : kernels_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace loom::runtime
