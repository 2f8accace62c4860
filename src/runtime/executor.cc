#include "loom/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <new>

#include "loom/runtime/op_profile.h"

namespace loom::runtime {

namespace {
struct Block {
  size_t offset, size;
};
constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
// Distinct shapes kept planned. A decode loop uses one or two; continuous batching
// a handful more as prefill chunks and batch sizes vary; beyond that the least
// recently used plan goes (re-planning one costs what every run used to).
constexpr size_t kMaxPlans = 16;
const Tensor kAbsent;  // an absent optional input
}  // namespace

// One binding of the symbols: the arena layout and every Tensor a run hands to
// the kernels, built once. Pointers into `inputs` and `node_outputs` stay valid
// because neither vector changes size after the plan is made.
struct Executor::Plan {
  std::vector<int64_t> symbols;
  std::vector<Tensor> inputs;              // per graph input: the caller's tensor, bound each run
  std::vector<Tensor> node_outputs;        // arena views, node by node
  std::vector<const Tensor*> node_inputs;  // each node's input table, node by node
  std::vector<const Tensor*> graph_outputs;
};

Executor::Executor(std::shared_ptr<const graph::Graph> g, const Backend& b, ThreadPool* pool)
    : graph_(std::move(g)), backend_(b), pool_(pool) {}

Executor::~Executor() = default;

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
  ex->in_begin_.push_back(0);
  ex->out_begin_.push_back(0);
  for (const graph::Node& n : nodes) {
    ex->in_begin_.push_back(ex->in_begin_.back() + n.inputs.size());
    ex->out_begin_.push_back(ex->out_begin_.back() + n.outputs.size());
  }
  ex->symbols_.assign(g.symbols().size(), -1);
  return ex;
}

Result<size_t> Executor::input_index(const std::string& name) const {
  const auto& in = graph_->inputs();
  for (size_t i = 0; i < in.size(); ++i)
    if (graph_->value(in[i]).name == name) return i;
  return not_found("the graph has no input '" + name + "'");
}

const Tensor& Executor::output(size_t i) const {
  if (!current_ || i >= current_->graph_outputs.size()) return kAbsent;
  return *current_->graph_outputs[i];
}

Status Executor::bind_symbols(std::span<const Tensor* const> inputs) {
  const graph::Graph& g = *graph_;
  if (inputs.size() != g.inputs().size())
    return invalid_argument("the graph has " + std::to_string(g.inputs().size()) + " inputs, " +
                            std::to_string(inputs.size()) + " were given");
  std::fill(symbols_.begin(), symbols_.end(), -1);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::Value& v = g.value(g.inputs()[i]);
    const Tensor* t = inputs[i];
    if (!t || !t->defined()) return invalid_argument("graph input '" + v.name + "' was not given");
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
        int64_t& bound = symbols_[static_cast<size_t>(dim.symbol)];
        if (bound >= 0 && bound != actual)
          return invalid_argument("graph input '" + v.name + "': dimension '" + g.symbols()[static_cast<size_t>(dim.symbol)] +
                                  "' is " + std::to_string(actual) + " here but " + std::to_string(bound) + " elsewhere");
        bound = actual;
      }
    }
  }
  return Status::Ok();
}

Result<Executor::Plan*> Executor::plan_for_symbols() {
  for (size_t i = plans_.size(); i-- > 0;) {
    if (plans_[i]->symbols != symbols_) continue;
    std::rotate(plans_.begin() + static_cast<long>(i), plans_.begin() + static_cast<long>(i) + 1, plans_.end());
    return plans_.back().get();
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan, make_plan());
  if (plans_.size() >= kMaxPlans) plans_.erase(plans_.begin());
  plans_.push_back(std::move(plan));
  return plans_.back().get();
}

Result<std::unique_ptr<Executor::Plan>> Executor::make_plan() {
  const graph::Graph& g = *graph_;
  const size_t nv = g.values().size();
  const auto& nodes = g.nodes();
  auto concrete = [&](const graph::SymShape& s, Shape* out) -> Status {
    out->clear();
    for (const graph::Dim& d : s) {
      if (d.is_static()) {
        out->push_back(d.value);
      } else {
        const int64_t b = symbols_[static_cast<size_t>(d.symbol)];
        if (b < 0) return internal_error("symbol '" + g.symbols()[static_cast<size_t>(d.symbol)] + "' is unbound");
        out->push_back(b);
      }
    }
    return Status::Ok();
  };

  // First-fit placement of node outputs in one arena, freeing a value's block
  // after its last reader.
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
    // Plans made for the smaller arena point into it: they are made again when
    // their shapes come back. Views a caller still holds keep the old one alive.
    plans_.clear();
    current_ = nullptr;
    arena_bytes_ = std::max(arena_end, kAlign);
    arena_ = allocate_aligned(arena_bytes_);
  }
  char* base = static_cast<char*>(arena_.get());

  auto plan = std::make_unique<Plan>();
  plan->symbols = symbols_;
  plan->inputs.resize(g.inputs().size());
  plan->node_outputs.reserve(out_begin_.back());
  std::vector<const Tensor*> where(nv, nullptr);
  for (size_t i = 0; i < g.inputs().size(); ++i) where[static_cast<size_t>(g.inputs()[i])] = &plan->inputs[i];
  for (const graph::Value& v : g.values())
    if (v.kind == graph::ValueKind::kParameter || v.kind == graph::ValueKind::kConstant)
      where[static_cast<size_t>(v.id)] = &v.tensor;
  for (const graph::Node& n : nodes)
    for (graph::ValueId o : n.outputs)
      plan->node_outputs.push_back(Tensor::wrap(base + offsets[static_cast<size_t>(o)], g.value(o).dtype,
                                                shapes[static_cast<size_t>(o)], arena_));
  for (const graph::Node& n : nodes)
    for (size_t k = 0; k < n.outputs.size(); ++k)
      where[static_cast<size_t>(n.outputs[k])] = &plan->node_outputs[out_begin_[static_cast<size_t>(n.id)] + k];
  plan->node_inputs.reserve(in_begin_.back());
  for (const graph::Node& n : nodes) {
    for (graph::ValueId v : n.inputs) {
      const Tensor* t = v == graph::kNoValue ? &kAbsent : where[static_cast<size_t>(v)];
      if (!t) return internal_error(n.op + " in " + n.scope + " reads value " + std::to_string(v) + " before it is made");
      plan->node_inputs.push_back(t);
    }
  }
  for (const auto& [name, v] : g.outputs()) {
    const Tensor* t = where[static_cast<size_t>(v)];
    if (!t) return internal_error("graph output '" + name + "' is made by no node");
    plan->graph_outputs.push_back(t);
  }
  return plan;
}

Status Executor::run(std::span<const Tensor* const> inputs, graph::StepContext* step) {
  const graph::Graph& g = *graph_;
  current_ = nullptr;
  LOOM_RETURN_IF_ERROR(bind_symbols(inputs));
  LOOM_ASSIGN_OR_RETURN(Plan * plan, plan_for_symbols());
  // Binding is a view's copy: the shape vectors already have their size.
  for (size_t i = 0; i < inputs.size(); ++i) plan->inputs[i] = *inputs[i];
  OpProfile& profile = OpProfile::global();
  const auto& nodes = g.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const graph::Node& n = nodes[i];
    KernelArgs args{g,
                    n,
                    TensorRefs(plan->node_inputs.data() + in_begin_[i], in_begin_[i + 1] - in_begin_[i]),
                    std::span<Tensor>(plan->node_outputs.data() + out_begin_[i], out_begin_[i + 1] - out_begin_[i]),
                    step,
                    *pool_,
                    states_[i].get()};
    const bool timed = profile.enabled();
    const auto t0 = timed ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    Status st;
    // A kernel's exception (its own, or a parallel region's rethrown by the pool)
    // becomes an error naming the op, as a Status from it would.
    try {
      st = kernels_[i]->run(args);
    } catch (const Error& e) {
      st = e.status();
    } catch (const std::bad_alloc&) {
      st = resource_exhausted("out of memory");
    } catch (const std::exception& e) {
      st = internal_error(e.what());
    }
    if (timed) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t rows = !args.out.empty() && args.out[0].rank() > 0 ? args.out[0].dim(0) : 1;
      profile.add(n.op, n.scope, rows, seconds);
    }
    if (!st.ok()) return st.with_context(n.op + (n.scope.empty() ? "" : " in " + n.scope));
  }
  current_ = plan;
  return Status::Ok();
}

Status Executor::run(const std::vector<std::pair<std::string, Tensor>>& inputs, graph::StepContext* step,
                     std::vector<Tensor>* outputs) {
  const graph::Graph& g = *graph_;
  std::vector<const Tensor*> bound(g.inputs().size(), nullptr);
  for (size_t i = 0; i < bound.size(); ++i) {
    const std::string& name = g.value(g.inputs()[i]).name;
    for (const auto& [given, tensor] : inputs)
      if (given == name) bound[i] = &tensor;
    if (!bound[i]) return invalid_argument("graph input '" + name + "' was not given");
  }
  LOOM_RETURN_IF_ERROR(run(std::span<const Tensor* const>(bound), step));
  outputs->resize(g.outputs().size());
  for (size_t i = 0; i < outputs->size(); ++i) (*outputs)[i] = output(i);
  return Status::Ok();
}

std::vector<std::string> Backend::ops() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : kernels_) out.push_back(k);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace loom::runtime
