#include "runtime/collective_kernels.h"

#include <cstring>
#include <vector>

#include "loom/runtime/collectives.h"

namespace loom::runtime {

namespace {

// The group the graph was sharded for must be the one this process runs in:
// a graph for 2 ranks run alone would silently compute half a model.
struct PartsState : NodeState {
  int64_t parts = 1;
};

Result<std::unique_ptr<NodeState>> prepare_parts(const graph::Graph&, const graph::Node& n) {
  auto s = std::make_unique<PartsState>();
  s->parts = n.attr_int("parts");
  return std::unique_ptr<NodeState>(std::move(s));
}

Result<Collectives*> group_for(const KernelArgs& a) {
  const graph::Node& n = a.node;
  const int64_t parts = static_cast<const PartsState*>(a.state)->parts;
  Collectives* g = process_collectives();
  const int64_t size = g ? g->size() : 1;
  if (size != parts)
    return failed_precondition(n.op + " of a graph sharded for " + std::to_string(parts) +
                               " tensor-parallel ranks, run in a group of " + std::to_string(size));
  return g;
}

}  // namespace

OpKernel all_reduce_kernel() {
  return OpKernel{prepare_parts, [](KernelArgs& a) -> Status {
                    LOOM_ASSIGN_OR_RETURN(Collectives * g, group_for(a));
                    const Tensor& x = a.in[0];
                    float* out = a.out[0].data_as<float>();
                    if (out != x.data_as<float>()) std::memcpy(out, x.data(), x.nbytes());
                    if (!g) return Status::Ok();
                    return g->all_reduce_sum(out, x.numel());
                  }};
}

OpKernel all_gather_kernel() {
  return OpKernel{prepare_parts, [](KernelArgs& a) -> Status {
                    LOOM_ASSIGN_OR_RETURN(Collectives * g, group_for(a));
                    const Tensor& x = a.in[0];
                    float* out = a.out[0].data_as<float>();
                    if (!g) {
                      std::memcpy(out, x.data(), x.nbytes());
                      return Status::Ok();
                    }
                    const int64_t rows = x.dim(0), cols = x.dim(1), parts = g->size();
                    // MPI gathers rank-major blocks; the op's output is row-major
                    // with each rank's columns side by side.
                    std::vector<float> blocks(static_cast<size_t>(rows * cols * parts));
                    LOOM_RETURN_IF_ERROR(g->all_gather(x.data_as<float>(), rows * cols, blocks.data()));
                    for (int64_t p = 0; p < parts; ++p)
                      for (int64_t r = 0; r < rows; ++r)
                        std::memcpy(out + r * cols * parts + p * cols, blocks.data() + (p * rows + r) * cols,
                                    static_cast<size_t>(cols) * sizeof(float));
                    return Status::Ok();
                  }};
}

}  // namespace loom::runtime
