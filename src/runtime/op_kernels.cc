// The graph ops on the CPU, in two flavours built from the same code: `cpu` calls
// the SIMD/BLAS routines of runtime/cpu, `reference` their scalar _ref twins.
// Validation and data movement (KV writes, row gathers) are shared, so the two
// backends differ only where the arithmetic does.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/runtime/backend.h"
#include "loom/runtime/cpu/attention.h"
#include "loom/runtime/cpu/elementwise.h"
#include "loom/runtime/cpu/matmul.h"
#include "loom/runtime/cpu/norm.h"
#include "loom/runtime/cpu/rope.h"
#include "runtime/collective_kernels.h"
#include "runtime/external_call_kernel.h"
#include "runtime/moe_kernel.h"
#include "loom/runtime/shared_packs.h"

namespace loom::runtime {
namespace {

using graph::Node;

// A state holding only a node's decoded attributes.
template <class T>
struct AttrState : NodeState {
  explicit AttrState(T v) : value(v) {}
  T value;
};
template <class T>
Result<std::unique_ptr<NodeState>> attr_state(T v) {
  return std::unique_ptr<NodeState>(std::make_unique<AttrState<T>>(v));
}
template <class T>
const T& attr_of(const KernelArgs& a) {
  return static_cast<const AttrState<T>*>(a.state)->value;
}

// rms_norm and layer_norm: weight (and bias) widened to f32 once, attributes decoded.
struct NormState : NodeState {
  std::vector<float> w, b;
  float eps = 0, offset = 0;
};
struct PackedWeight : NodeState {
  std::shared_ptr<const cpu::PackedLinear> packed;
};
struct RopeState : NodeState {
  cpu::RopeParams params;
  int64_t head_dim = 0, rotary_dim = 0, num_heads = 0;
  std::vector<float> inv_freq;  // for every type but dynamic (longrope: the short factors)
  std::vector<float> long_inv_freq;  // longrope past original_max_position_embeddings
  float attention_scaling = 1.0f;
  bool per_sequence = false;  // dynamic, longrope: the frequencies follow each sequence's length
  bool longrope = false;
  std::vector<float> scratch_inv_freq;  // dynamic: a sequence's frequencies, reused from step to step
};

std::vector<float> to_f32(const Tensor& t) { return t.to_f32_vector(); }

int64_t rows_of(const Tensor& t) { return t.dim(0); }
int64_t cols_of(const Tensor& t) { return t.dim(1); }

Status require_step(const KernelArgs& a) {
  if (!a.step || !a.step->kv)
    return failed_precondition("attention needs a StepContext with a KV store (run the graph through a ModelRunner)");
  return Status::Ok();
}

// ── embedding ──
// A table that is also a linear's weight (tied LM head) is read from the linear's
// packed copy: packing released the file pages under the table, and looking rows
// up there would fault them back in (on a 1B Q4_0 file, 50-160 MB more resident).
template <bool kRef>
OpKernel embedding_kernel() {
  OpKernel k;
  if (!kRef) {
    k.prepare = [](const graph::Graph& g, const Node& n) -> Result<std::unique_ptr<NodeState>> {
      const Tensor& table = g.value(n.inputs[0]).tensor;
      if (!table.defined() || table.rank() != 2) return std::unique_ptr<NodeState>();
      for (const Node& other : g.nodes()) {
        if (other.op != "linear" || other.inputs.size() < 2) continue;
        const Tensor& w = g.value(other.inputs[1]).tensor;
        if (w.data() != table.data() || w.dtype() != table.dtype() || w.shape() != table.shape()) continue;
        const bool has_bias = other.inputs.size() > 2 && other.inputs[2] != graph::kNoValue;
        auto s = std::make_unique<PackedWeight>();
        LOOM_ASSIGN_OR_RETURN(s->packed, shared_packed_linear(w, has_bias ? &g.value(other.inputs[2]).tensor : nullptr));
        return std::unique_ptr<NodeState>(std::move(s));
      }
      return std::unique_ptr<NodeState>();
    };
  }
  k.run = [](KernelArgs& a) -> Status {
    const Tensor& table = a.in[0];
    const Tensor& ids = a.in[1];
    const int64_t v = table.dim(0), h = table.dim(1), n = ids.dim(0);
    const int32_t* id = ids.data_as<int32_t>();
    for (int64_t i = 0; i < n; ++i)
      if (id[i] < 0 || id[i] >= v)
        return out_of_range("token id " + std::to_string(id[i]) + " at row " + std::to_string(i) +
                            " is outside the embedding table [0, " + std::to_string(v) + ")");
    float* out = a.out[0].data_as<float>();
    const auto* tied = static_cast<PackedWeight*>(a.state);
    // Rows of a quantized table are whole blocks, dequantized one row at a time.
    const size_t row_bytes = dtype_bytes(table.dtype(), h);
    a.pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        if (tied) {
          tied->packed->weight_row(id[i], out + i * h);
        } else {
          convert_elements(static_cast<const char*>(table.data()) + static_cast<size_t>(id[i]) * row_bytes,
                           table.dtype(), out + i * h, DType::kF32, static_cast<size_t>(h));
        }
      }
    });
    return Status::Ok();
  };
  return k;
}

// ── gather_rows ──
Status run_gather_rows(KernelArgs& a) {
  const Tensor& x = a.in[0];
  const int64_t n = rows_of(x), h = cols_of(x), m = a.in[1].dim(0);
  const int32_t* idx = a.in[1].data_as<int32_t>();
  for (int64_t i = 0; i < m; ++i) {
    if (idx[i] < 0 || idx[i] >= n)
      return out_of_range("gather_rows: index " + std::to_string(idx[i]) + " outside [0, " + std::to_string(n) + ")");
    std::memcpy(a.out[0].data_as<float>() + i * h, x.data_as<float>() + idx[i] * h, static_cast<size_t>(h) * 4);
  }
  return Status::Ok();
}

// ── linear ──
template <bool kRef>
OpKernel linear_kernel() {
  OpKernel k;
  if (!kRef) {
    k.prepare = [](const graph::Graph& g, const Node& n) -> Result<std::unique_ptr<NodeState>> {
      auto s = std::make_unique<PackedWeight>();
      const Tensor& w = g.value(n.inputs[1]).tensor;
      const bool has_bias = n.inputs.size() > 2 && n.inputs[2] != graph::kNoValue;
      const Tensor* b = has_bias ? &g.value(n.inputs[2]).tensor : nullptr;
      LOOM_ASSIGN_OR_RETURN(s->packed, shared_packed_linear(w, b));
      return std::unique_ptr<NodeState>(std::move(s));
    };
  }
  k.run = [](KernelArgs& a) -> Status {
    const Tensor& x = a.in[0];
    const int64_t m = rows_of(x), kdim = cols_of(x);
    if (kRef) {
      const Tensor* bias = a.in.size() > 2 && a.in[2].defined() ? &a.in[2] : nullptr;
      cpu::linear_ref(x.data_as<float>(), m, kdim, a.in[1], bias, a.out[0].data_as<float>());
    } else {
      const cpu::PackedLinear& p = *static_cast<PackedWeight*>(a.state)->packed;
      cpu::linear(x.data_as<float>(), m, kdim, p, a.out[0].data_as<float>(), p.out_features(), a.pool);
    }
    return Status::Ok();
  };
  return k;
}

// ── rms_norm ──
template <bool kRef>
OpKernel rms_norm_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph& g, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<NormState>();
    s->w = to_f32(g.value(n.inputs[1]).tensor);
    s->eps = static_cast<float>(n.attr_float("eps"));
    s->offset = static_cast<float>(n.attr_float("weight_offset", 0.0));
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [](KernelArgs& a) -> Status {
    const auto& st = *static_cast<const NormState*>(a.state);
    const auto& w = st.w;
    const int64_t group = static_cast<int64_t>(w.size());
    const int64_t rows = rows_of(a.in[0]) * (cols_of(a.in[0]) / group);
    const float eps = st.eps, offset = st.offset;
    if (kRef)
      cpu::rmsnorm_ref(a.in[0].data_as<float>(), group, rows, group, w.data(), eps, offset, a.out[0].data_as<float>(), group);
    else
      cpu::rmsnorm(a.in[0].data_as<float>(), rows, group, w.data(), eps, offset, a.out[0].data_as<float>(), a.pool);
    return Status::Ok();
  };
  return k;
}

// ── add_rms_norm ── (loom:AddRMSNorm) outputs (a + b, rms_norm(a + b)).
template <bool kRef>
OpKernel add_rms_norm_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph& g, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<NormState>();
    s->w = to_f32(g.value(n.inputs[2]).tensor);
    s->eps = static_cast<float>(n.attr_float("eps"));
    s->offset = static_cast<float>(n.attr_float("weight_offset", 0.0));
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [](KernelArgs& a) -> Status {
    const auto& st = *static_cast<const NormState*>(a.state);
    const int64_t rows = rows_of(a.in[0]), n = cols_of(a.in[0]);
    const float *x = a.in[0].data_as<float>(), *y = a.in[1].data_as<float>();
    float *sum = a.out[0].data_as<float>(), *out = a.out[1].data_as<float>();
    if (kRef)
      cpu::add_rmsnorm_ref(x, y, rows, n, st.w.data(), st.eps, st.offset, sum, out);
    else
      cpu::add_rmsnorm(x, y, rows, n, st.w.data(), st.eps, st.offset, sum, out, a.pool);
    return Status::Ok();
  };
  return k;
}

// ── layer_norm ── (GPT-2)
template <bool kRef>
OpKernel layer_norm_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph& g, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<NormState>();
    s->w = to_f32(g.value(n.inputs[1]).tensor);
    s->eps = static_cast<float>(n.attr_float("eps"));
    if (n.inputs.size() > 2 && n.inputs[2] != graph::kNoValue) s->b = to_f32(g.value(n.inputs[2]).tensor);
    if (!s->b.empty() && s->b.size() != s->w.size())
      return invalid_argument("layer_norm in " + n.scope + ": bias has " + std::to_string(s->b.size()) +
                              " elements but weight has " + std::to_string(s->w.size()));
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [](KernelArgs& a) -> Status {
    const auto* st = static_cast<const NormState*>(a.state);
    const int64_t n = cols_of(a.in[0]);
    const float eps = st->eps;
    const float* bias = st->b.empty() ? nullptr : st->b.data();
    if (kRef)
      cpu::layernorm_ref(a.in[0].data_as<float>(), rows_of(a.in[0]), n, st->w.data(), bias, eps, a.out[0].data_as<float>());
    else
      cpu::layernorm(a.in[0].data_as<float>(), rows_of(a.in[0]), n, st->w.data(), bias, eps, a.out[0].data_as<float>(),
                     a.pool);
    return Status::Ok();
  };
  return k;
}

// ── elementwise ──
template <bool kRef>
OpKernel binary_kernel(bool is_add) {
  OpKernel k;
  k.run = [is_add](KernelArgs& a) -> Status {
    const int64_t n = a.in[0].numel();
    const float *x = a.in[0].data_as<float>(), *y = a.in[1].data_as<float>();
    float* o = a.out[0].data_as<float>();
    if (kRef) (is_add ? cpu::add_ref : cpu::mul_ref)(x, y, n, o);
    else (is_add ? cpu::add : cpu::mul)(x, y, n, o, a.pool);
    return Status::Ok();
  };
  return k;
}

template <bool kRef>
OpKernel activation_kernel(bool is_gelu) {
  OpKernel k;
  k.prepare = [is_gelu](const graph::Graph&, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    cpu::Activation act = cpu::Activation::kSilu;
    if (is_gelu) act = n.attr_str("approximate", "none") == "tanh" ? cpu::Activation::kGeluTanh : cpu::Activation::kGeluErf;
    return attr_state(act);
  };
  k.run = [](KernelArgs& a) -> Status {
    const cpu::Activation act = attr_of<cpu::Activation>(a);
    if (kRef) cpu::activation_ref(act, a.in[0].data_as<float>(), a.in[0].numel(), a.out[0].data_as<float>());
    else cpu::activation(act, a.in[0].data_as<float>(), a.in[0].numel(), a.out[0].data_as<float>(), a.pool);
    return Status::Ok();
  };
  return k;
}

// ── silu_and_mul ── (gate, up) or one [n, 2I] = [gate | up]: strides address the halves, no copy.
template <bool kRef>
OpKernel silu_and_mul_kernel() {
  OpKernel k;
  k.run = [](KernelArgs& a) -> Status {
    const bool split = a.in.size() > 1 && a.in[1].defined();
    const int64_t rows = rows_of(a.out[0]), n = cols_of(a.out[0]);
    const float* gate = a.in[0].data_as<float>();
    const float* up = split ? a.in[1].data_as<float>() : gate + n;
    const int64_t in_stride = split ? n : 2 * n;
    float* out = a.out[0].data_as<float>();
    if (kRef)
      cpu::gated_activation_ref(cpu::Activation::kSilu, gate, in_stride, up, in_stride, rows, n, out, n);
    else
      cpu::silu_and_mul(gate, in_stride, up, in_stride, rows, n, out, n, a.pool);
    return Status::Ok();
  };
  return k;
}

// ── split_columns ── pure data movement, shared by both backends.
Status run_split_columns(KernelArgs& a) {
  const Tensor& x = a.in[0];
  const int64_t rows = rows_of(x), stride = cols_of(x);
  int64_t col = 0;
  for (Tensor& o : a.out) {
    const int64_t w = cols_of(o);
    const float* src = x.data_as<float>() + col;
    float* dst = o.data_as<float>();
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * w, src + r * stride, static_cast<size_t>(w) * 4);
    col += w;
  }
  if (col != stride) return internal_error("split_columns: outputs cover " + std::to_string(col) + " of " +
                                           std::to_string(stride) + " columns");
  return Status::Ok();
}

template <bool kRef>
OpKernel scale_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph&, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    return attr_state(static_cast<float>(n.attr_float("factor")));
  };
  k.run = [](KernelArgs& a) -> Status {
    const float f = attr_of<float>(a);
    if (kRef) cpu::scale_ref(a.in[0].data_as<float>(), f, a.in[0].numel(), a.out[0].data_as<float>());
    else cpu::scale(a.in[0].data_as<float>(), f, a.in[0].numel(), a.out[0].data_as<float>(), a.pool);
    return Status::Ok();
  };
  return k;
}

template <bool kRef>
OpKernel softcap_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph&, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    return attr_state(static_cast<float>(n.attr_float("cap")));
  };
  k.run = [](KernelArgs& a) -> Status {
    const float cap = attr_of<float>(a);
    if (kRef) cpu::softcap_ref(a.in[0].data_as<float>(), cap, a.in[0].numel(), a.out[0].data_as<float>());
    else cpu::softcap(a.in[0].data_as<float>(), cap, a.in[0].numel(), a.out[0].data_as<float>(), a.pool);
    return Status::Ok();
  };
  return k;
}

// ── rope ──
cpu::RopeParams rope_params(const Node& n) {
  cpu::RopeParams p;
  p.type = n.attr_str("rope_type");
  p.theta = n.attr_float("theta");
  p.factor = n.attr_float("factor", 1.0);
  p.low_freq_factor = n.attr_float("low_freq_factor", 1.0);
  p.high_freq_factor = n.attr_float("high_freq_factor", 4.0);
  p.original_max_position_embeddings = n.attr_int("original_max_position_embeddings", 0);
  p.max_position_embeddings = n.attr_int("max_position_embeddings", 0);
  p.beta_fast = n.attr_float("beta_fast", 32.0);
  p.beta_slow = n.attr_float("beta_slow", 1.0);
  auto opt = [&](const char* key) -> std::optional<double> {
    const double v = n.attr_float(key, -1.0);
    return v < 0 ? std::nullopt : std::optional<double>(v);
  };
  p.mscale = opt("mscale");
  p.mscale_all_dim = opt("mscale_all_dim");
  p.attention_factor = opt("attention_factor");
  p.truncate = n.attr_int("truncate", 1) != 0;
  if (p.type == "longrope") {
    p.long_factor = n.attr_floats("long_factor");
    p.short_factor = n.attr_floats("short_factor");
  }
  p.partial_rotary_factor = static_cast<double>(n.attr_int("rotary_dim")) / static_cast<double>(n.attr_int("head_dim"));
  return p;
}

template <bool kRef>
OpKernel rope_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph&, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<RopeState>();
    s->params = rope_params(n);
    s->head_dim = n.attr_int("head_dim");
    s->rotary_dim = n.attr_int("rotary_dim");
    s->num_heads = n.attr_int("num_heads");
    if (s->params.type != "dynamic")
      LOOM_RETURN_IF_ERROR(cpu::compute_inv_freq(s->params, s->head_dim, 0, &s->inv_freq, &s->attention_scaling));
    s->per_sequence = s->params.type == "dynamic" || s->params.type == "longrope";
    s->longrope = s->params.type == "longrope";
    if (s->params.type == "longrope")
      LOOM_RETURN_IF_ERROR(cpu::compute_inv_freq(s->params, s->head_dim, s->params.original_max_position_embeddings + 1,
                                                 &s->long_inv_freq, &s->attention_scaling));
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [](KernelArgs& a) -> Status {
    auto* s = static_cast<RopeState*>(a.state);
    const Tensor& x = a.in[0];
    float* out = a.out[0].data_as<float>();
    if (out != x.data_as<float>()) std::memcpy(out, x.data(), x.nbytes());
    const int32_t* pos = a.in[1].data_as<int32_t>();
    const int64_t rows = rows_of(x), stride = cols_of(x);
    auto apply = [&](int64_t begin, int64_t count, const std::vector<float>& inv_freq, float scaling) {
      if (kRef)
        cpu::rope_apply_ref(out + begin * stride, count, s->num_heads, s->head_dim, stride, pos + begin, inv_freq.data(),
                            s->rotary_dim, scaling);
      else
        cpu::rope_apply(out + begin * stride, count, s->num_heads, s->head_dim, stride, pos + begin, inv_freq.data(),
                        s->rotary_dim, scaling, a.pool);
    };
    if (!s->per_sequence) {
      apply(0, rows, s->inv_freq, s->attention_scaling);
      return Status::Ok();
    }
    const graph::StepSequence whole{0, rows, 0};
    const bool batched = a.step && !a.step->sequences.empty();
    const graph::StepSequence* seqs = batched ? a.step->sequences.data() : &whole;
    const size_t count = batched ? a.step->sequences.size() : 1;
    auto furthest = [&](const graph::StepSequence& sq) {
      int32_t max_pos = 0;
      for (int64_t i = 0; i < sq.q_len; ++i) max_pos = std::max(max_pos, pos[sq.q_begin + i]);
      return max_pos;
    };
    if (s->longrope) {
      // Transformers switches to the long factors when max(position_ids) + 1 of the
      // forward passes the original length; here per sequence, so a sequence's
      // rotation does not depend on what else is in the batch.
      for (size_t i = 0; i < count; ++i) {
        const graph::StepSequence& sq = seqs[i];
        const bool long_seq = furthest(sq) + 1 > s->params.original_max_position_embeddings;
        apply(sq.q_begin, sq.q_len, long_seq ? s->long_inv_freq : s->inv_freq, s->attention_scaling);
      }
      return Status::Ok();
    }
    // Dynamic NTK depends on the sequence length, so each sequence gets its own
    // frequencies (Transformers uses max(position_ids) + 1 of the forward call).
    std::vector<float>& inv_freq = s->scratch_inv_freq;
    float scaling = 1.0f;
    for (size_t i = 0; i < count; ++i) {
      const graph::StepSequence& sq = seqs[i];
      LOOM_RETURN_IF_ERROR(cpu::compute_inv_freq(s->params, s->head_dim, furthest(sq) + 1, &inv_freq, &scaling));
      apply(sq.q_begin, sq.q_len, inv_freq, scaling);
    }
    return Status::Ok();
  };
  return k;
}

// ── attention ──
struct AttentionState : NodeState {
  int layer = 0;
  cpu::AttentionParams params;
  std::vector<float> sinks;  // gpt-oss's per-head sink logits, widened once; params.sinks points here
  std::vector<cpu::AttentionSequence> seqs;  // reused from step to step
  std::vector<float> rot;                    // one head vector being rotated before it is stored
};

template <bool kRef>
OpKernel attention_kernel() {
  OpKernel k;
  k.prepare = [](const graph::Graph& g, const Node& n) -> Result<std::unique_ptr<NodeState>> {
    auto s = std::make_unique<AttentionState>();
    s->layer = static_cast<int>(n.attr_int("layer"));
    if (n.inputs.size() > 3 && n.inputs[3] != graph::kNoValue) {
      const Tensor& sinks = g.value(n.inputs[3]).tensor;
      if (!sinks.defined()) return invalid_argument("attention in " + n.scope + ": the sinks must be a weight");
      s->sinks = sinks.to_f32_vector();
      s->params.sinks = s->sinks.data();
    }
    cpu::AttentionParams& p = s->params;
    p.num_q_heads = n.attr_int("num_q_heads");
    p.num_kv_heads = n.attr_int("num_kv_heads");
    p.head_dim = n.attr_int("head_dim");
    p.scale = static_cast<float>(n.attr_float("scale"));
    p.sliding_window = n.attr_int("sliding_window", 0);
    p.softcap = static_cast<float>(n.attr_float("softcap", 0.0));
    return std::unique_ptr<NodeState>(std::move(s));
  };
  k.run = [](KernelArgs& a) -> Status {
    LOOM_RETURN_IF_ERROR(require_step(a));
    auto& state = *static_cast<AttentionState*>(a.state);
    const int layer = state.layer;
    const cpu::AttentionParams& p = state.params;
    const Tensor &q = a.in[0], &k_new = a.in[1], &v_new = a.in[2];
    const int64_t kv_row = p.num_kv_heads * p.head_dim;
    const auto& step = *a.step;
    if (static_cast<int64_t>(step.positions.size()) != q.dim(0))
      return internal_error("attention: step has " + std::to_string(step.positions.size()) + " positions for " +
                            std::to_string(q.dim(0)) + " rows");
    std::vector<cpu::AttentionSequence>& seqs = state.seqs;
    seqs.clear();
    for (size_t s = 0; s < step.sequences.size(); ++s) {
      const graph::StepSequence& sq = step.sequences[s];
      const graph::KvPageTable t = step.kv->pages(layer, static_cast<int>(s));
      // Checked before the K/V writes below, which would otherwise write f32 into pages of another width.
      if (!graph::kv_dtype_supported(t.format.k) || !graph::kv_dtype_supported(t.format.v))
        return invalid_argument("attention layer " + std::to_string(layer) + ": KV types " +
                                std::string(dtype_name(t.format.k)) + "/" + std::string(dtype_name(t.format.v)) +
                                " are not supported (F32, BF16, F16, Q8_0 or Q4_0)");
      for (int64_t i = 0; i < sq.q_len; ++i) {
        const int64_t row = sq.q_begin + i;
        const int64_t pos = step.positions[static_cast<size_t>(row)];
        const int64_t page = pos / t.page_size, off = pos % t.page_size;
        if (page >= t.num_pages || !t.k_pages[page] || !t.v_pages[page])
          return out_of_range("attention layer " + std::to_string(layer) + ": sequence " + std::to_string(s) +
                              " has no KV page for position " + std::to_string(pos));
        const float* k_src = k_new.data_as<float>() + row * kv_row;
        const float* v_src = v_new.data_as<float>() + row * kv_row;
        // Rounded (bf16, f16) or quantized (q8_0, q4_0) once, per head vector, after the
        // Hadamard rotation when the cache keeps them rotated.
        for (int64_t kvh = 0; kvh < p.num_kv_heads; ++kvh) {
          const float* kh = k_src + kvh * p.head_dim;
          const float* vh = v_src + kvh * p.head_dim;
          if (t.format.rotate_k) {
            state.rot.assign(kh, kh + p.head_dim);
            cpu::kv_rotate(state.rot.data(), p.head_dim);
            kh = state.rot.data();
          }
          cpu::kv_store_row(t.k_pages[page], t.format.k, true, off, kvh, t.page_size, p.head_dim, kh);
          if (t.format.rotate_v) {
            state.rot.assign(vh, vh + p.head_dim);
            cpu::kv_rotate(state.rot.data(), p.head_dim);
            vh = state.rot.data();
          }
          cpu::kv_store_row(t.v_pages[page], t.format.v, false, off, kvh, t.page_size, p.head_dim, vh);
        }
      }
      cpu::AttentionSequence as;
      as.q_begin = sq.q_begin;
      as.q_len = sq.q_len;
      as.positions = step.positions.data() + sq.q_begin;
      as.kv = cpu::KvPages{t.k_pages, t.v_pages, t.num_pages, t.page_size, sq.past_len + sq.q_len, t.format};
      seqs.push_back(as);
    }
    const int64_t q_row = p.num_q_heads * p.head_dim;
    LOOM_RETURN_IF_ERROR(cpu::check_paged_attention_args(q.data_as<float>(), q_row, seqs.data(),
                                                         static_cast<int64_t>(seqs.size()), p, a.out[0].data_as<float>(), q_row));
    if (kRef)
      cpu::paged_attention_ref(q.data_as<float>(), q_row, seqs.data(), static_cast<int64_t>(seqs.size()), p,
                               a.out[0].data_as<float>(), q_row);
    else
      cpu::paged_attention(q.data_as<float>(), q_row, seqs.data(), static_cast<int64_t>(seqs.size()), p,
                           a.out[0].data_as<float>(), q_row, a.pool);
    return Status::Ok();
  };
  return k;
}

template <bool kRef>
Backend make_backend(const char* name) {
  Backend b(name);
  b.add("embedding", embedding_kernel<kRef>());
  b.add("gather_rows", OpKernel{nullptr, run_gather_rows});
  b.add("linear", linear_kernel<kRef>());
  b.add("rms_norm", rms_norm_kernel<kRef>());
  b.add("add_rms_norm", add_rms_norm_kernel<kRef>());
  b.add("layer_norm", layer_norm_kernel<kRef>());
  b.add("add", binary_kernel<kRef>(true));
  b.add("mul", binary_kernel<kRef>(false));
  b.add("silu", activation_kernel<kRef>(false));
  b.add("gelu", activation_kernel<kRef>(true));
  b.add("silu_and_mul", silu_and_mul_kernel<kRef>());
  b.add("split_columns", OpKernel{nullptr, run_split_columns});
  b.add("scale", scale_kernel<kRef>());
  b.add("softcap", softcap_kernel<kRef>());
  b.add("rope", rope_kernel<kRef>());
  b.add("attention", attention_kernel<kRef>());
  b.add("moe", moe_op_kernel(kRef));
  b.add("external_call", external_call_op_kernel());
  b.add("all_reduce", all_reduce_kernel());
  b.add("all_gather", all_gather_kernel());
  return b;
}

}  // namespace

const Backend& reference_backend() {
  static const Backend b = make_backend<true>("reference");
  return b;
}

const Backend& cpu_backend() {
  static const Backend b = make_backend<false>("cpu");
  return b;
}

const Backend* find_backend(const std::string& name) {
  if (name == "cpu") return &cpu_backend();
  if (name == "reference") return &reference_backend();
  return nullptr;
}

}  // namespace loom::runtime
