// Every graph op on the cpu backend against the reference backend, after ggml's
// test-backend-ops: a one-node graph per case, recorded through GraphBuilder and run by
// Executor on both backends, over random shapes with tails (sizes that are not multiples
// of any SIMD width) and every dtype the op accepts, compared by NMSE against one table of
// bounds. The ops come from the schemas and the backends, so an op added without a case
// here fails EveryOpIsSweptOrListed instead of being skipped. Each op is offered every
// DType in its typed slot: what the schema refuses is skipped, what both backends refuse
// with an error too, and what only one of them runs fails; so does an op no dtype runs.
// Ops whose kernel both backends share (data movement) are also held against the outputs
// the test computes itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "loom/graph/builder.h"
#include "loom/graph/external_call_abi.h"
#include "loom/graph/external_functions.h"
#include "loom/graph/op_schema.h"
#include "loom/runtime/cpu/attention.h"
#include "loom/runtime/executor.h"

namespace loom::runtime {
namespace op_sweep {

using graph::AttrValue;
using graph::Dim;
using graph::ValueId;

// ── The one table of bounds ──
// NMSE = Σ(cpu − reference)² / Σ reference², over all of a case's outputs, by the dtype
// that limits the cpu backend's precision: the weights' (linear, embedding, norms, moe),
// the KV cache's (attention), else F32 (activations are always F32).
const std::map<DType, double> kMaxNmse = {
    {DType::kF32, 1e-10},   // f32 FMA order and SIMD approximations vs the double reference
    {DType::kF16, 1e-10},   // widened exactly, then as F32
    {DType::kBF16, 2e-4},   // x rounded to bf16 where bf16 dot products are fast (matmul.h)
    // x quantized to int8 per block (32, or 256 for the K types) where the reference keeps it
    // f32: about 1e-4 on average, with the tail of a case with a single output.
    {DType::kQ8_0, 2e-3},
    {DType::kQ4_0, 2e-3},
    {DType::kQ4_K, 2e-3},
    {DType::kQ5_K, 2e-3},
    {DType::kQ6_K, 2e-3},
    {DType::kQ4_1, 2e-3},
    {DType::kQ5_0, 2e-3},
    {DType::kQ5_1, 2e-3},
    {DType::kIQ4_NL, 2e-3},
    {DType::kMXFP4, 2e-3},
};

// Ops no case can run in a unit test, with the reason. An op must have cases or be here.
const std::map<std::string, std::string> kNotSwept = {};

// Every dtype a tensor can have: each op is offered each in its typed slot.
// (A block type loom cannot quantize to makes no random tensor: its cases are skipped.)
const DType kAllDtypes[] = {DType::kF32,    DType::kBF16,    DType::kF16,    DType::kI32,   DType::kI64,
                            DType::kU8,     DType::kBool,    DType::kI8,     DType::kQ8_0,  DType::kQ4_0,
                            DType::kQ4_K,   DType::kQ5_K,    DType::kQ6_K,   DType::kQ4_1,  DType::kQ5_0,
                            DType::kQ5_1,   DType::kQ2_K,    DType::kQ3_K,   DType::kIQ4_NL, DType::kIQ4_XS,
                            DType::kMXFP4,  DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                            DType::kIQ3_S,  DType::kIQ1_S,   DType::kIQ1_M,  DType::kTQ1_0, DType::kTQ2_0};
static_assert(std::size(kAllDtypes) == static_cast<size_t>(kLastDType) + 1, "a new DType belongs in kAllDtypes");

// Sizes around SIMD widths (4, 8, 16 floats) and panel sizes (32), never a multiple of them
// only: 1, 7, 33, 67.
const int64_t kRows[] = {1, 7, 33};
const int64_t kCols[] = {1, 7, 33, 67};

using Rng = std::mt19937;

std::vector<float> normal(int64_t n, Rng& rng, float stddev = 1.0f) {
  std::normal_distribution<float> nd(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = nd(rng);
  return v;
}

Tensor random_tensor(Shape shape, DType dtype, Rng& rng, float stddev = 1.0f) {
  return Tensor::from_f32(normal(shape_numel(shape), rng, stddev), shape).to(dtype);
}

template <class T, size_t N>
T pick(const T (&options)[N], Rng& rng) {
  return options[std::uniform_int_distribution<size_t>(0, N - 1)(rng)];
}

// A graph KV store of small pages (so a sequence spans several, with a partial last
// page), filled with the same random K/V for positions before each sequence's new tokens
// whenever it is made: each backend gets its own copy, since attention writes into it.
class PagedStore : public graph::KvStore {
 public:
  PagedStore(int64_t page_size, int64_t kv_heads, int64_t head_dim, DType dtype, const std::vector<graph::StepSequence>& seqs,
             uint32_t seed)
      : page_size_(page_size), dtype_(dtype) {
    Rng rng(seed);
    const int64_t page_elems = page_size * kv_heads * head_dim;
    for (const graph::StepSequence& s : seqs) {
      const int64_t pages = (s.past_len + s.q_len + page_size - 1) / page_size;
      Seq q;
      for (int64_t p = 0; p < pages; ++p) {
        q.k.push_back(random_tensor({page_elems}, dtype, rng));
        q.v.push_back(random_tensor({page_elems}, dtype, rng));
        q.k_ptrs.push_back(q.k.back().data());
        q.v_ptrs.push_back(q.v.back().data());
      }
      seqs_.push_back(std::move(q));
    }
  }
  graph::KvPageTable pages(int layer, int seq) override {
    Seq& s = seqs_.at(static_cast<size_t>(seq));
    EXPECT_EQ(layer, 0);
    return {s.k_ptrs.data(), s.v_ptrs.data(), static_cast<int64_t>(s.k_ptrs.size()), page_size_,
            graph::KvFormat{dtype_, dtype_, false, false}};
  }

 private:
  struct Seq {
    std::vector<Tensor> k, v;
    std::vector<void*> k_ptrs, v_ptrs;
  };
  int64_t page_size_;
  DType dtype_;
  std::vector<Seq> seqs_;
};

struct Case {
  std::string label;
  DType bound = DType::kF32;  // row of kMaxNmse
  std::shared_ptr<graph::Graph> graph;
  std::vector<std::pair<std::string, Tensor>> inputs;
  bool has_step = false;
  graph::StepContext step;                               // kv filled per run from make_kv
  std::function<std::unique_ptr<graph::KvStore>()> make_kv;  // null: no KV store
  // For ops whose kernel both backends share (data movement): the outputs computed here,
  // which the reference backend must give exactly.
  std::function<std::vector<std::vector<float>>()> oracle;
};

std::vector<std::vector<float>> identity_of(const Tensor& x) { return {x.to_f32_vector()}; }

// Records one node through GraphBuilder (the op's patch point, as models record it).
class OneNode {
 public:
  explicit OneNode(std::string label) : graph_(std::make_shared<graph::Graph>()) {
    c_.label = std::move(label);
    builder_ = std::make_unique<graph::GraphBuilder>(graph_.get(), [this](const std::string& name) { return params_.at(name); });
  }
  ValueId input(const std::string& name, Tensor t) {
    graph::SymShape shape;
    for (int64_t d : t.shape()) shape.push_back(Dim::fixed(d));
    c_.inputs.emplace_back(name, t);
    return graph_->add_input(name, t.dtype(), shape);
  }
  ValueId param(const std::string& name, Tensor t) {
    params_[name] = std::move(t);
    return builder_->param(name);
  }
  // Throws loom::Error when the schema refuses the inputs.
  Case op(const std::string& op, std::vector<ValueId> inputs, std::map<std::string, AttrValue> attrs, DType bound) {
    builder_->op(op, std::move(inputs), std::move(attrs));
    const graph::Node& n = graph_->nodes().back();
    for (size_t i = 0; i < n.outputs.size(); ++i) graph_->mark_output("y" + std::to_string(i), n.outputs[i]);
    c_.graph = graph_;
    c_.bound = bound;
    return c_;
  }

 private:
  Case c_;
  std::shared_ptr<graph::Graph> graph_;
  std::map<std::string, Tensor> params_;
  std::unique_ptr<graph::GraphBuilder> builder_;
};

std::string shape_label(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [k, v] : dims) s += std::string(" ") + k + "=" + std::to_string(v);
  return s;
}

std::string dt(DType d) { return std::string(dtype_name(d)); }

// The bound of a case whose typed slot holds `d`: its row when it has one, else F32's
// (integer tables are converted to f32 exactly).
DType bound_for(DType d) { return kMaxNmse.count(d) ? d : DType::kF32; }

// ── Case generators: op → cases with `d` in the op's typed slot ──
// The typed slot is the weight for ops with one, the KV cache for attention, else the
// activation input. A generator throws loom::Error (from the schema) for a dtype the op
// refuses.
using Generator = std::function<std::vector<Case>(DType d, Rng& rng)>;

// Quantized weights need whole blocks along a row.
int64_t in_features(DType d, Rng& rng) {
  const int64_t block = dtype_block_elements(d);
  if (block > 1) return block * std::uniform_int_distribution<int64_t>(1, 2)(rng);
  const int64_t options[] = {1, 7, 33, 67, 130};
  return pick(options, rng);
}

std::vector<Case> unary(const std::string& op, std::map<std::string, AttrValue> attrs, DType d, Rng& rng, float stddev = 2.0f) {
  std::vector<Case> out;
  for (int64_t m : kRows) {
    const int64_t n = pick(kCols, rng);
    OneNode b(op + " " + dt(d) + shape_label({{"m", m}, {"n", n}}));
    ValueId x = b.input("x", random_tensor({m, n}, d, rng, stddev));
    out.push_back(b.op(op, {x}, attrs, bound_for(d)));
  }
  return out;
}

std::vector<Case> binary(const std::string& op, DType d, Rng& rng) {
  std::vector<Case> out;
  for (int64_t m : kRows) {
    const int64_t n = pick(kCols, rng);
    OneNode b(op + " " + dt(d) + shape_label({{"m", m}, {"n", n}}));
    ValueId x = b.input("a", random_tensor({m, n}, d, rng));
    ValueId y = b.input("b", random_tensor({m, n}, d, rng));
    out.push_back(b.op(op, {x, y}, {}, bound_for(d)));
  }
  return out;
}

extern "C" void sweep_rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += static_cast<double>(x[r * cols + c]) * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = static_cast<float>(x[r * cols + c] * inv * w[c]);
  }
}

extern "C" void sweep_add_rms_norm(const float* residual, const float* x, const float* w, float* sum, float* y, int64_t rows,
                                   int64_t cols, float eps) {
  for (int64_t i = 0; i < rows * cols; ++i) sum[i] = residual[i] + x[i];
  sweep_rms_norm(sum, w, y, rows, cols, eps);
}

extern "C" void sweep_silu_and_mul(const float* gate, const float* up, float* y, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; ++i) y[i] = static_cast<float>(gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i]);
}

std::map<std::string, Generator> generators() {
  std::map<std::string, Generator> g;

  g["add"] = [](DType d, Rng& rng) { return binary("add", d, rng); };
  g["mul"] = [](DType d, Rng& rng) { return binary("mul", d, rng); };
  g["silu"] = [](DType d, Rng& rng) { return unary("silu", {}, d, rng, 4.0f); };
  g["gelu"] = [](DType d, Rng& rng) {
    std::vector<Case> out = unary("gelu", {}, d, rng, 4.0f);
    for (Case& c : unary("gelu", {{"approximate", std::string("tanh")}}, d, rng, 4.0f)) out.push_back(c);
    return out;
  };
  g["scale"] = [](DType d, Rng& rng) { return unary("scale", {{"factor", 0.37}}, d, rng); };
  g["softcap"] = [](DType d, Rng& rng) {
    std::vector<Case> out = unary("softcap", {{"cap", 30.0}}, d, rng, 40.0f);
    for (Case& c : unary("softcap", {{"cap", 0.5}}, d, rng, 1.0f)) out.push_back(c);
    return out;
  };

  // The weight is the typed slot, as for rms_norm; a weight offset of 1 (Gemma) on every
  // other case.
  g["add_rms_norm"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows) {
      const int64_t n = pick(kCols, rng);
      const double offset = m == 7 ? 1.0 : 0.0;
      OneNode b("add_rms_norm " + dt(d) + shape_label({{"m", m}, {"n", n}}) + (offset > 0 ? " offset 1" : ""));
      ValueId x = b.input("residual", random_tensor({m, n}, DType::kF32, rng, 3.0f));
      ValueId h = b.input("h", random_tensor({m, n}, DType::kF32, rng));
      ValueId w = b.param("w", random_tensor({n}, d, rng, 0.5f));
      out.push_back(b.op("add_rms_norm", {x, h, w}, {{"eps", 1e-6}, {"weight_offset", offset}}, bound_for(d)));
    }
    return out;
  };

  g["silu_and_mul"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows) {
      const int64_t n = pick(kCols, rng);
      {
        OneNode b("silu_and_mul (gate, up) " + dt(d) + shape_label({{"m", m}, {"n", n}}));
        ValueId gate = b.input("gate", random_tensor({m, n}, d, rng, 3.0f));
        ValueId up = b.input("up", random_tensor({m, n}, d, rng));
        out.push_back(b.op("silu_and_mul", {gate, up}, {}, bound_for(d)));
      }
      OneNode b("silu_and_mul [gate|up] " + dt(d) + shape_label({{"m", m}, {"n", n}}));
      ValueId gate_up = b.input("gate_up", random_tensor({m, 2 * n}, d, rng, 3.0f));
      out.push_back(b.op("silu_and_mul", {gate_up}, {}, bound_for(d)));
    }
    return out;
  };

  g["split_columns"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows) {
      const std::vector<int64_t> sizes = {pick(kCols, rng), pick(kCols, rng), pick(kCols, rng)};
      OneNode b("split_columns " + dt(d) + shape_label({{"m", m}, {"q", sizes[0]}, {"k", sizes[1]}, {"v", sizes[2]}}));
      const Tensor xt = random_tensor({m, sizes[0] + sizes[1] + sizes[2]}, d, rng);
      ValueId x = b.input("x", xt);
      Case c = b.op("split_columns", {x}, {{"sizes", sizes}}, bound_for(d));
      c.oracle = [xt, sizes] {
        const std::vector<float> v = xt.to_f32_vector();
        const int64_t rows = xt.dim(0), width = xt.dim(1);
        std::vector<std::vector<float>> parts;
        int64_t first = 0;
        for (int64_t w : sizes) {
          std::vector<float> part;
          for (int64_t r = 0; r < rows; ++r)
            part.insert(part.end(), v.begin() + r * width + first, v.begin() + r * width + first + w);
          parts.push_back(part);
          first += w;
        }
        return parts;
      };
      out.push_back(c);
    }
    return out;
  };

  g["gather_rows"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows) {
      const int64_t n = pick(kCols, rng), picked = pick(kRows, rng);
      std::vector<int32_t> idx(static_cast<size_t>(picked));
      for (int32_t& i : idx) i = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(m - 1))(rng);
      OneNode b("gather_rows " + dt(d) + shape_label({{"m", m}, {"n", n}, {"picked", picked}}));
      const Tensor xt = random_tensor({m, n}, d, rng);
      ValueId x = b.input("x", xt);
      ValueId i = b.input("indices", Tensor::from_i32(idx, {picked}));
      Case c = b.op("gather_rows", {x, i}, {}, bound_for(d));
      c.oracle = [xt, idx, n] {
        const std::vector<float> v = xt.to_f32_vector();
        std::vector<float> rows;
        for (int32_t r : idx) rows.insert(rows.end(), v.begin() + r * n, v.begin() + (r + 1) * n);
        return std::vector<std::vector<float>>{rows};
      };
      out.push_back(c);
    }
    return out;
  };

  g["embedding"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows) {
      const int64_t vocab = pick(kCols, rng), h = in_features(d, rng);
      std::vector<int32_t> ids(static_cast<size_t>(m));
      for (int32_t& i : ids) i = std::uniform_int_distribution<int32_t>(0, static_cast<int32_t>(vocab - 1))(rng);
      OneNode b("embedding " + dt(d) + shape_label({{"tokens", m}, {"vocab", vocab}, {"h", h}}));
      const Tensor tt = random_tensor({vocab, h}, d, rng);
      ValueId table = b.param("table", tt);
      ValueId i = b.input("ids", Tensor::from_i32(ids, {m}));
      Case c = b.op("embedding", {table, i}, {}, bound_for(d));
      c.oracle = [tt, ids, h] {  // the table's rows, dequantized or widened as a whole
        const std::vector<float> v = tt.to(DType::kF32).to_f32_vector();
        std::vector<float> rows;
        for (int32_t r : ids) rows.insert(rows.end(), v.begin() + r * h, v.begin() + (r + 1) * h);
        return std::vector<std::vector<float>>{rows};
      };
      out.push_back(c);
    }
    return out;
  };

  g["linear"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows)
      for (bool bias : {false, true}) {
        const int64_t k = in_features(d, rng), n = pick(kCols, rng);
        OneNode b("linear " + dt(d) + shape_label({{"m", m}, {"k", k}, {"n", n}, {"bias", bias}}));
        ValueId x = b.input("x", random_tensor({m, k}, DType::kF32, rng));
        std::vector<ValueId> in = {x, b.param("w", random_tensor({n, k}, d, rng))};
        if (bias) in.push_back(b.param("b", random_tensor({n}, DType::kF32, rng)));
        out.push_back(b.op("linear", in, {}, bound_for(d)));
      }
    return out;
  };

  g["rms_norm"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (int64_t m : kRows)
      for (int64_t groups : {1, 3}) {  // 3: per-head norms (q_norm / k_norm) over one row of 3 heads
        const int64_t n = pick(kCols, rng);
        const double offset = groups == 1 ? 0.0 : 1.0;
        OneNode b("rms_norm " + dt(d) + shape_label({{"m", m}, {"group", n}, {"groups", groups}}));
        ValueId x = b.input("x", random_tensor({m, n * groups}, DType::kF32, rng, 3.0f));
        ValueId w = b.param("w", random_tensor({n}, d, rng));
        out.push_back(b.op("rms_norm", {x, w}, {{"eps", 1e-6}, {"weight_offset", offset}}, bound_for(d)));
      }
    return out;
  };

  g["layer_norm"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    const int64_t widths[] = {2, 7, 33, 67};  // a row of 1 normalises to 0 whatever the kernel
    for (int64_t m : kRows)
      for (bool bias : {false, true}) {
        const int64_t n = pick(widths, rng);
        OneNode b("layer_norm " + dt(d) + shape_label({{"m", m}, {"n", n}, {"bias", bias}}));
        ValueId x = b.input("x", random_tensor({m, n}, DType::kF32, rng, 3.0f));
        std::vector<ValueId> in = {x, b.param("w", random_tensor({n}, d, rng))};
        if (bias) in.push_back(b.param("b", random_tensor({n}, d, rng)));
        out.push_back(b.op("layer_norm", in, {{"eps", 1e-5}}, bound_for(d)));
      }
    return out;
  };

  g["rope"] = [](DType d, Rng& rng) {
    // Each rope type's attributes, as models record them (models/ rope attrs).
    const std::vector<std::pair<std::string, std::map<std::string, AttrValue>>> types = {
        {"default", {}},
        {"linear", {{"factor", 2.0}}},
        {"dynamic", {{"factor", 2.0}, {"max_position_embeddings", int64_t{16}}}},
        {"llama3", {{"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", int64_t{32}}}},
        {"yarn", {{"factor", 4.0}, {"original_max_position_embeddings", int64_t{32}}}},
        {"longrope", {{"original_max_position_embeddings", int64_t{20}}, {"max_position_embeddings", int64_t{80}}}},
    };
    std::vector<Case> out;
    for (const auto& [type, extra] : types) {
      const int64_t heads = std::uniform_int_distribution<int64_t>(1, 3)(rng);
      const int64_t head_dims[] = {6, 34, 64};
      const int64_t head_dim = pick(head_dims, rng);
      const int64_t rotary_dim = type == "default" ? head_dim / 2 / 2 * 2 : head_dim;  // partial rotary once
      // Two sequences (for the per-sequence types: one past the original length, one not).
      const int64_t len0 = pick(kRows, rng), len1 = pick(kRows, rng);
      std::vector<int32_t> pos;
      for (int64_t i = 0; i < len0; ++i) pos.push_back(static_cast<int32_t>(3 + i));
      for (int64_t i = 0; i < len1; ++i) pos.push_back(static_cast<int32_t>(40 + i));
      std::map<std::string, AttrValue> attrs = extra;
      attrs["num_heads"] = heads;
      attrs["head_dim"] = head_dim;
      attrs["rotary_dim"] = rotary_dim;
      attrs["rope_type"] = type;
      attrs["theta"] = 10000.0;
      if (type == "longrope") {
        std::vector<double> longf, shortf;
        for (int64_t i = 0; i < rotary_dim / 2; ++i) {
          longf.push_back(1.0 + 0.5 * static_cast<double>(i));
          shortf.push_back(1.0 + 0.05 * static_cast<double>(i));
        }
        attrs["long_factor"] = longf;
        attrs["short_factor"] = shortf;
      }
      const int64_t m = len0 + len1;
      OneNode b("rope " + type + " " + dt(d) +
                shape_label({{"tokens", m}, {"heads", heads}, {"head_dim", head_dim}, {"rotary_dim", rotary_dim}}));
      ValueId x = b.input("x", random_tensor({m, heads * head_dim}, d, rng));
      ValueId p = b.input("positions", Tensor::from_i32(pos, {m}));
      Case c = b.op("rope", {x, p}, attrs, bound_for(d));
      c.has_step = true;
      c.step.sequences = {{0, len0, 3}, {len0, len1, 40}};
      c.step.positions = pos;
      out.push_back(c);
    }
    return out;
  };

  g["attention"] = [](DType d, Rng& rng) {
    struct Variant {
      const char* name;
      int64_t q_heads, kv_heads, window;
      double softcap;
      bool sinks = false;  // gpt-oss's per-head sink logits (a weight of the sweep's dtype)
    };
    const Variant variants[] = {{"mha", 2, 2, 0, 0.0},     {"gqa", 4, 2, 0, 0.0},         {"window", 4, 1, 5, 0.0},
                                {"softcap", 2, 1, 0, 50.0}, {"sinks", 4, 2, 5, 0.0, true}};
    std::vector<Case> out;
    for (const Variant& v : variants) {
      const int64_t head_dims[] = {8, 20, 64};
      const int64_t head_dim = pick(head_dims, rng);
      const int64_t page_sizes[] = {4, 16};
      const int64_t page_size = pick(page_sizes, rng);
      // A prefill with a past (chunked prefill), a decode step and a fresh prompt, packed.
      const std::vector<graph::StepSequence> seqs = {
          {0, pick(kRows, rng), 9}, {0, 1, 21}, {0, pick(kRows, rng), 0}};
      std::vector<graph::StepSequence> packed = seqs;
      std::vector<int32_t> pos;
      int64_t row = 0;
      for (graph::StepSequence& s : packed) {
        s.q_begin = row;
        row += s.q_len;
        for (int64_t i = 0; i < s.q_len; ++i) pos.push_back(static_cast<int32_t>(s.past_len + i));
      }
      const int64_t m = row;
      OneNode b(std::string("attention ") + v.name + " KV " + dt(d) +
                shape_label({{"tokens", m}, {"q_heads", v.q_heads}, {"kv_heads", v.kv_heads}, {"head_dim", head_dim},
                             {"page", page_size}}));
      ValueId q = b.input("q", random_tensor({m, v.q_heads * head_dim}, DType::kF32, rng));
      ValueId k = b.input("k", random_tensor({m, v.kv_heads * head_dim}, DType::kF32, rng));
      ValueId val = b.input("v", random_tensor({m, v.kv_heads * head_dim}, DType::kF32, rng));
      std::map<std::string, AttrValue> attrs = {{"layer", int64_t{0}},
                                                {"num_q_heads", v.q_heads},
                                                {"num_kv_heads", v.kv_heads},
                                                {"head_dim", head_dim},
                                                {"scale", 1.0 / std::sqrt(static_cast<double>(head_dim))}};
      if (v.window) attrs["sliding_window"] = v.window;
      if (v.softcap > 0) attrs["softcap"] = v.softcap;
      std::vector<ValueId> in = {q, k, val};
      if (v.sinks) in.push_back(b.param("sinks", random_tensor({v.q_heads}, d, rng, 2.0f)));
      Case c = b.op("attention", in, attrs, bound_for(d));
      c.has_step = true;
      c.step.sequences = packed;
      c.step.positions = pos;
      const uint32_t seed = static_cast<uint32_t>(rng());
      const int64_t kv_heads = v.kv_heads;
      c.make_kv = [=] { return std::make_unique<PagedStore>(page_size, kv_heads, head_dim, d, packed, seed); };
      out.push_back(c);
    }
    return out;
  };

  g["moe"] = [](DType d, Rng& rng) {
    std::vector<Case> out;
    for (bool shared : {false, true})
      for (const char* act : {"silu", "gelu_pytorch_tanh"}) {
        const int64_t tokens = pick(kRows, rng), experts = 4, top_k = shared ? 1 : 2;
        const int64_t h = pick(kCols, rng), inter = pick(kCols, rng);
        OneNode b(std::string("moe ") + act + (shared ? " shared " : " ") + dt(d) +
                  shape_label({{"tokens", tokens}, {"h", h}, {"i", inter}, {"top_k", top_k}}));
        std::vector<ValueId> in = {b.input("x", random_tensor({tokens, h}, DType::kF32, rng)),
                                   b.param("router", random_tensor({experts, h}, d, rng)),
                                   b.param("gate_up", random_tensor({experts, 2 * inter, h}, d, rng, 0.5f)),
                                   b.param("down", random_tensor({experts, h, inter}, d, rng, 0.5f))};
        if (shared) {
          in.push_back(b.input("shared", random_tensor({tokens, h}, DType::kF32, rng)));
          in.push_back(b.param("shared_gate", random_tensor({1, h}, d, rng)));
        }
        out.push_back(b.op("moe", in,
                           {{"top_k", top_k}, {"norm_topk_prob", int64_t{shared ? 0 : 1}}, {"activation", std::string(act)}},
                           bound_for(d)));
      }
    {
      // gpt-oss: biases, top-k then softmax, the clamped SwiGLU (gate_up large enough to clamp).
      const int64_t tokens = pick(kRows, rng), experts = 4, h = pick(kCols, rng), inter = pick(kCols, rng);
      OneNode b(std::string("moe gpt-oss ") + dt(d) + shape_label({{"tokens", tokens}, {"h", h}, {"i", inter}}));
      std::vector<ValueId> in = {b.input("x", random_tensor({tokens, h}, DType::kF32, rng)),
                                 b.param("router", random_tensor({experts, h}, d, rng)),
                                 b.param("gate_up", random_tensor({experts, 2 * inter, h}, d, rng, 4.0f)),
                                 b.param("down", random_tensor({experts, h, inter}, d, rng, 0.5f)),
                                 graph::kNoValue,
                                 graph::kNoValue,
                                 b.param("router_bias", random_tensor({experts}, d, rng)),
                                 b.param("gate_up_bias", random_tensor({experts, 2 * inter}, d, rng)),
                                 b.param("down_bias", random_tensor({experts, h}, d, rng))};
      out.push_back(b.op("moe", in,
                         {{"top_k", int64_t{2}}, {"norm_topk_prob", int64_t{0}}, {"activation", std::string("silu")},
                          {"routing", std::string("topk_softmax")}, {"swiglu_limit", 7.0}, {"swiglu_alpha", 1.702}},
                         bound_for(d)));
    }
    return out;
  };

  g["external_call"] = [](DType d, Rng& rng) {
    // The callee is the plugin's code on both backends; what the sweep checks is that both
    // hand it the same arguments (the weight widened to f32 with its offset applied).
    EXPECT_TRUE(graph::register_external_function({"op_sweep:rms_norm", LOOM_CALL_RMS_NORM_F32_V1,
                                                   reinterpret_cast<void (*)(void)>(sweep_rms_norm), nullptr})
                    .ok());
    EXPECT_TRUE(graph::register_external_function({"op_sweep:silu_and_mul", LOOM_CALL_SILU_AND_MUL_F32_V1,
                                                   reinterpret_cast<void (*)(void)>(sweep_silu_and_mul), nullptr})
                    .ok());
    EXPECT_TRUE(graph::register_external_function({"op_sweep:add_rms_norm", LOOM_CALL_ADD_RMS_NORM_F32_V1,
                                                   reinterpret_cast<void (*)(void)>(sweep_add_rms_norm), nullptr})
                    .ok());
    std::vector<Case> out;
    for (int64_t m : kRows) {
      const int64_t n = pick(kCols, rng);
      {
        OneNode b("external_call add_rms_norm " + dt(d) + shape_label({{"m", m}, {"n", n}}));
        const Tensor rt = random_tensor({m, n}, d, rng), xt = random_tensor({m, n}, d, rng);
        const Tensor wt = random_tensor({n}, DType::kBF16, rng);
        ValueId r = b.input("residual", rt);
        ValueId x = b.input("x", xt);
        ValueId w = b.param("w", wt);
        Case c = b.op("external_call", {r, x, w},
                      {{"callee", std::string("op_sweep:add_rms_norm")},
                       {"signature", std::string(LOOM_CALL_ADD_RMS_NORM_F32_V1)},
                       {"eps", 1e-6},
                       {"weight_offset", 1.0}},
                      bound_for(d));
        c.oracle = [rt, xt, wt, m, n] {  // the callee on the weight widened, offset applied: (sum, y)
          std::vector<float> w1 = wt.to_f32_vector(), sum(static_cast<size_t>(m * n)), y(sum.size());
          for (float& v : w1) v += 1.0f;
          sweep_add_rms_norm(rt.to_f32_vector().data(), xt.to_f32_vector().data(), w1.data(), sum.data(), y.data(), m, n,
                             1e-6f);
          return std::vector<std::vector<float>>{sum, y};
        };
        out.push_back(c);
      }
      {
        OneNode b("external_call rms_norm " + dt(d) + shape_label({{"m", m}, {"n", n}}));
        const Tensor xt = random_tensor({m, n}, d, rng), wt = random_tensor({n}, DType::kBF16, rng);
        ValueId x = b.input("x", xt);
        ValueId w = b.param("w", wt);
        Case c = b.op("external_call", {x, w},
                      {{"callee", std::string("op_sweep:rms_norm")},
                       {"signature", std::string(LOOM_CALL_RMS_NORM_F32_V1)},
                       {"eps", 1e-6},
                       {"weight_offset", 1.0}},
                      bound_for(d));
        c.oracle = [xt, wt, m, n] {  // the callee on the weight widened, offset applied
          std::vector<float> w1 = wt.to_f32_vector(), y(static_cast<size_t>(m * n));
          for (float& v : w1) v += 1.0f;
          sweep_rms_norm(xt.to_f32_vector().data(), w1.data(), y.data(), m, n, 1e-6f);
          return std::vector<std::vector<float>>{y};
        };
        out.push_back(c);
      }
      OneNode b("external_call silu_and_mul " + dt(d) + shape_label({{"m", m}, {"n", n}}));
      ValueId gate = b.input("gate", random_tensor({m, n}, d, rng));
      ValueId up = b.input("up", random_tensor({m, n}, d, rng));
      out.push_back(b.op("external_call", {gate, up},
                         {{"callee", std::string("op_sweep:silu_and_mul")},
                          {"signature", std::string(LOOM_CALL_SILU_AND_MUL_F32_V1)}},
                         bound_for(d)));
    }
    return out;
  };

  // Collectives in the process's group, which in a unit test is the group of one
  // (collectives.h): parts = 1, where both ops are identity. Several ranks are swept by
  // tests/tensor_parallel under mpirun.
  for (const char* op : {"all_reduce", "all_gather"}) {
    g[op] = [op](DType d, Rng& rng) {
      std::vector<Case> out = unary(op, {{"parts", int64_t{1}}}, d, rng);
      for (Case& c : out) c.oracle = [x = c.inputs[0].second] { return identity_of(x); };
      return out;
    };
  }
  return g;
}

// What one backend made of a case: the outputs widened to f32, or the error.
struct Outcome {
  Status status = Status::Ok();
  std::vector<std::vector<float>> outputs;
};

Outcome run_on(const Backend& backend, const Case& c, ThreadPool& pool) {
  Outcome o;
  try {
    auto ex = Executor::create(c.graph, backend, &pool);
    if (!ex.ok()) {
      o.status = ex.status();
      return o;
    }
    graph::StepContext step = c.step;
    std::unique_ptr<graph::KvStore> kv = c.make_kv ? c.make_kv() : nullptr;
    step.kv = kv.get();
    std::vector<Tensor> outs;
    o.status = ex.value()->run(c.inputs, c.has_step ? &step : nullptr, &outs);
    if (o.status.ok())
      for (const Tensor& t : outs) o.outputs.push_back(t.to_f32_vector());
  } catch (const Error& e) {
    o.status = e.status();
  }
  return o;
}

std::set<std::string> all_ops() {
  std::set<std::string> ops;
  for (const std::string& op : graph::op_names()) ops.insert(op);
  for (const std::string& op : cpu_backend().ops()) ops.insert(op);
  for (const std::string& op : reference_backend().ops()) ops.insert(op);
  return ops;
}

TEST(OpSweep, EveryOpIsSweptOrListed) {
  const auto gens = generators();
  for (const std::string& op : all_ops()) {
    EXPECT_TRUE(gens.count(op) || kNotSwept.count(op))
        << "op '" << op << "' has no case in tests/runtime/op_sweep_test.cc generators() and no reason in kNotSwept";
    EXPECT_FALSE(gens.count(op) && kNotSwept.count(op)) << op << " is both swept and listed as not swept";
    EXPECT_NE(graph::find_op_schema(op), nullptr) << "backend op '" << op << "' has no schema";
    EXPECT_NE(cpu_backend().find(op), nullptr) << "op '" << op << "' has no cpu kernel";
    EXPECT_NE(reference_backend().find(op), nullptr) << "op '" << op << "' has no reference kernel";
  }
  for (const auto& [op, gen] : gens) EXPECT_TRUE(all_ops().count(op)) << "case for unknown op '" << op << "'";
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double e = static_cast<double>(got[i]) - want[i];
    err += e * e;
    ref += static_cast<double>(want[i]) * want[i];
  }
  return ref > 0 ? err / ref : (err > 0 ? INFINITY : 0.0);
}

TEST(OpSweep, CpuMatchesReferenceOnEveryOpAndDtype) {
  ThreadPool pool(2);  // two threads: the cpu kernels split work, the reference does not
  std::map<DType, double> worst;
  std::map<std::string, std::set<std::string>> accepted;  // op → dtype names swept
  int compared = 0;
  for (const auto& [op, gen] : generators()) {
    for (DType d : kAllDtypes) {
      Rng rng(static_cast<uint32_t>(std::hash<std::string>()(op)) ^ static_cast<uint32_t>(d) * 7919u);
      std::vector<Case> cases;
      try {
        cases = gen(d, rng);
      } catch (const Error&) {
        continue;  // the schema refuses this dtype in the op's typed slot
      }
      for (const Case& c : cases) {
        SCOPED_TRACE(c.label);
        const Outcome ref = run_on(reference_backend(), c, pool);
        const Outcome cpu = run_on(cpu_backend(), c, pool);
        // A dtype either backend refuses must be refused by both, with an error saying so.
        if (!ref.status.ok() || !cpu.status.ok()) {
          EXPECT_EQ(ref.status.ok(), cpu.status.ok())
              << "one backend refuses: reference: " << ref.status.message() << " | cpu: " << cpu.status.message();
          EXPECT_FALSE(ref.status.message().empty());
          EXPECT_FALSE(cpu.status.message().empty());
          continue;
        }
        accepted[op].insert(dt(d));
        if (c.oracle) EXPECT_EQ(ref.outputs, c.oracle()) << "the reference backend differs from the data movement it does";
        ASSERT_EQ(cpu.outputs.size(), ref.outputs.size());
        std::vector<float> got, want;
        for (size_t i = 0; i < ref.outputs.size(); ++i) {
          ASSERT_EQ(cpu.outputs[i].size(), ref.outputs[i].size()) << "output " << i;
          got.insert(got.end(), cpu.outputs[i].begin(), cpu.outputs[i].end());
          want.insert(want.end(), ref.outputs[i].begin(), ref.outputs[i].end());
        }
        bool finite = true;
        for (size_t i = 0; i < want.size(); ++i) finite = finite && std::isfinite(want[i]) && std::isfinite(got[i]);
        EXPECT_TRUE(finite) << "non-finite output";
        double ref_energy = 0;
        for (float v : want) ref_energy += static_cast<double>(v) * v;
        EXPECT_GT(ref_energy, 0.0) << "the reference output is all zeros: the case checks nothing";
        const double e = nmse(got, want);
        const double bound = kMaxNmse.at(c.bound);
        EXPECT_LE(e, bound) << "NMSE " << e << " over the " << dt(c.bound) << " bound " << bound;
        worst[c.bound] = std::max(worst[c.bound], e);
        ++compared;
      }
    }
    EXPECT_FALSE(accepted[op].empty()) << op << ": no dtype ran on both backends";
  }
  std::string summary;
  for (const auto& [d, e] : worst) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " %s=%.2g", dt(d).c_str(), e);
    summary += buf;
  }
  for (const auto& [op, dts] : accepted) {
    summary += "\n  " + op + ":";
    for (const std::string& d : dts) summary += " " + d;
  }
  std::printf("%d cases; worst NMSE by dtype:%s\n", compared, summary.c_str());
}

}  // namespace op_sweep
}  // namespace loom::runtime
