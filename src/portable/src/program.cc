// Loading, validating and running a portable program, and the C API. The
// program file and its sidecar weights file are mapped read-only and used in
// place (no copy of the weights); the arena and the KV state are allocated
// once at load time.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"
#include "loom_portable.h"
#include "loom_program_generated.h"
#include "lpte_weights_file.h"
#include "moe.h"

namespace fb = loom::portable::fb;

namespace lp {

// A whole file mapped read-only (MAP_PRIVATE: nothing is ever written back).
// The pages are the page cache's: several programs loading the same file share
// them. A file truncated by someone else *after* the load faults (SIGBUS) on
// access, as with any mapping; everything checkable at load time is checked.
struct Mapping {
  const uint8_t* data = nullptr;
  size_t size = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data) ::munmap(const_cast<uint8_t*>(data), size);
  }
};

}  // namespace lp

struct lp_program {
  lp::Mapping file, weights_file;
  std::string weights_path;
  const fb::Program* p = nullptr;
  const lp::Kernels* k = nullptr;
  std::vector<const void*> weights;   // each WeightData's values (f32 or bf16), in the program or the weights file
  std::vector<float> arena;           // arena_bytes / 4 floats (f32 and i32 share it)
  std::vector<float> state;           // K and V of every layer
  int ids = -1, positions = -1, indices = -1, logits = -1;
  std::string error;
};

namespace lp {
namespace {

thread_local std::string g_load_error;

struct Fail {
  std::string what;
};

[[noreturn]] void fail(const std::string& what) { throw Fail{what}; }

const char* op_name(fb::OpCode c) { return fb::EnumNameOpCode(c); }

// One chunk's view of the tensors: pointer and rows.
struct Run {
  lp_program* prog;
  int64_t tokens = 0, selected = 0;
  int64_t seq_len = 0;  // start_pos + n of the lp_run call: what dynamic rope scales by

  const fb::Tensor* t(int id) const { return prog->p->tensors()->Get(static_cast<uint32_t>(id)); }
  int64_t rows(int id) const {
    const fb::Tensor* x = t(id);
    switch (x->row_kind()) {
      case fb::RowKind_Tokens: return tokens;
      case fb::RowKind_Selected: return selected;
      default: return x->rows();
    }
  }
  int64_t cols(int id) const { return t(id)->cols(); }
  float* f(int id) const {
    const fb::Tensor* x = t(id);
    if (x->kind() == fb::TensorKind_Weight) return static_cast<float*>(const_cast<void*>(prog->weights[static_cast<size_t>(x->weight())]));
    return prog->arena.data() + x->offset() / 4;
  }
  int32_t* i(int id) const { return reinterpret_cast<int32_t*>(f(id)); }
  bool bf16(int id) const { return t(id)->type() == fb::ElemType_BF16; }
  const uint16_t* w16(int id) const { return reinterpret_cast<const uint16_t*>(f(id)); }
};

int in(const fb::Op* op, uint32_t i) { return i < op->inputs()->size() ? op->inputs()->Get(i) : -1; }
int out(const fb::Op* op, uint32_t i) { return op->outputs()->Get(i); }

void run_attention(const Run& r, const fb::Op* op) {
  const int q = in(op, 0), k = in(op, 1), v = in(op, 2), pos = in(op, 3), o = out(op, 0);
  const int64_t hq = op->num_heads(), hkv = op->num_kv_heads(), d = op->head_dim(), n = r.rows(q);
  const int64_t kv_row = hkv * d, q_row = hq * d, group = hq / hkv;
  const auto* layer = r.prog->p->kv_layers()->Get(static_cast<uint32_t>(op->layer()));
  float* kc = r.prog->state.data() + layer->k_offset();
  float* vc = r.prog->state.data() + layer->v_offset();
  const int32_t* p = r.i(pos);
  const int64_t max_pos = r.prog->p->max_positions();
  for (int64_t t = 0; t < n; ++t) {
    if (p[t] < 0 || p[t] >= max_pos)
      fail("attention layer " + std::to_string(op->layer()) + ": position " + std::to_string(p[t]) +
           " is outside the KV cache [0, " + std::to_string(max_pos) + ")");
    std::memcpy(kc + p[t] * kv_row, r.f(k) + t * kv_row, static_cast<size_t>(kv_row) * 4);
    std::memcpy(vc + p[t] * kv_row, r.f(v) + t * kv_row, static_cast<size_t>(kv_row) * 4);
  }
  const float scale = static_cast<float>(op->scale()), cap = static_cast<float>(op->softcap());
  const bool ref = r.prog->k == &reference_kernels();
  std::vector<double> scores, acc(static_cast<size_t>(d));
  std::vector<float> accf(static_cast<size_t>(d));
  for (int64_t t = 0; t < n; ++t) {
    const int64_t at = p[t];
    const int64_t lo = op->sliding_window() > 0 ? std::max<int64_t>(0, at - op->sliding_window() + 1) : 0;
    for (int64_t h = 0; h < hq; ++h) {
      const int64_t kvh = h / group;
      const float* qr = r.f(q) + t * q_row + h * d;
      scores.assign(static_cast<size_t>(at - lo + 1), 0.0);
      double mx = -INFINITY;
      for (int64_t c = lo; c <= at; ++c) {
        double sc;
        if (ref) {
          double dot = 0;
          const float* kr = kc + c * kv_row + kvh * d;
          for (int64_t j = 0; j < d; ++j) dot += static_cast<double>(qr[j]) * kr[j];
          sc = dot * scale;
        } else {
          sc = static_cast<double>(r.prog->k->dot(qr, kc + c * kv_row + kvh * d, d) * scale);
        }
        if (cap > 0) sc = cap * std::tanh(sc / cap);
        scores[static_cast<size_t>(c - lo)] = sc;
        mx = std::max(mx, sc);
      }
      double sum = 0;
      float* orow = r.f(o) + t * q_row + h * d;
      if (ref) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t c = lo; c <= at; ++c) {
          const double w = std::exp(scores[static_cast<size_t>(c - lo)] - mx);
          sum += w;
          const float* vr = vc + c * kv_row + kvh * d;
          for (int64_t j = 0; j < d; ++j) acc[static_cast<size_t>(j)] += w * vr[j];
        }
        for (int64_t j = 0; j < d; ++j) orow[j] = static_cast<float>(acc[static_cast<size_t>(j)] / sum);
      } else {
        std::fill(accf.begin(), accf.end(), 0.0f);
        for (int64_t c = lo; c <= at; ++c) {
          const double w = std::exp(scores[static_cast<size_t>(c - lo)] - mx);
          sum += w;
          r.prog->k->axpy(static_cast<float>(w), vc + c * kv_row + kvh * d, d, accf.data());
        }
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j < d; ++j) orow[j] = accf[static_cast<size_t>(j)] * inv;
      }
    }
  }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// x, router [E, H], gate_up [E·2I, H], down [E·H, I] (+ shared [T, H], shared_gate [1, H]); shapes checked at load.
void run_moe(const Run& r, const fb::Op* op) {
  const int x = in(op, 0), router = in(op, 1), gate_up = in(op, 2), down = in(op, 3), shared = in(op, 4), gate = in(op, 5);
  auto matrix = [&](int id) { return r.bf16(id) ? Matrix{nullptr, r.w16(id)} : Matrix{r.f(id), nullptr}; };
  MoeWeights w;
  w.experts = r.t(router)->rows();
  w.hidden = r.cols(x);
  w.inter = r.t(gate_up)->rows() / (2 * w.experts);
  w.router = matrix(router);
  w.gate_up = matrix(gate_up);
  w.down = matrix(down);
  w.shared_gate = shared >= 0 ? r.f(gate) : nullptr;
  MoeParams p;
  p.top_k = op->top_k();
  p.norm_topk_prob = op->norm_topk_prob();
  p.act = op->activation() == fb::Activation_GeluErf    ? Activation::kGeluErf
          : op->activation() == fb::Activation_GeluTanh ? Activation::kGeluTanh
                                                        : Activation::kSilu;
  const float* sh = shared >= 0 ? r.f(shared) : nullptr;
  if (r.prog->k == &reference_kernels()) moe_reference(r.f(x), r.rows(x), w, p, sh, r.f(out(op, 0)));
  else moe_grouped(*r.prog->k, r.f(x), r.rows(x), w, p, sh, r.f(out(op, 0)));
}

// NTK-dynamic rope, loom's semantics (runtime/cpu/rope_params.cc, Transformers'
// _compute_dynamic_ntk_parameters): with len = max(seq_len, mpe),
// base = theta · (factor · len / mpe − (factor − 1)) ^ (dim / (dim − 2)) in
// double, inv_freq_i = 1 / f32(base) ^ (2i / dim) in f32, angles in f32. loom
// takes seq_len = the step's largest position + 1; here it is start_pos + n of
// the lp_run call, the same number for one call of a whole prompt or one token.
void run_dynamic_rope(const Run& r, const fb::Op* op) {
  const int x = in(op, 0);
  const int32_t* pos = r.i(in(op, 1));
  float* o = r.f(out(op, 0));
  const int64_t rows = r.rows(x), stride = r.cols(x), dim = op->rotary_dim(), half = dim / 2, hd = op->head_dim();
  if (o != r.f(x)) std::memcpy(o, r.f(x), static_cast<size_t>(rows * stride) * 4);
  const double mpe = static_cast<double>(op->max_position_embeddings()), factor = op->factor();
  const double len = std::max(static_cast<double>(r.seq_len), mpe);
  const double base = op->theta() * std::pow(factor * len / mpe - (factor - 1), static_cast<double>(dim) / static_cast<double>(dim - 2));
  const float b = static_cast<float>(base);
  std::vector<float> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(b, static_cast<float>(2 * i) / static_cast<float>(dim));
  for (int64_t t = 0; t < rows; ++t) {
    if (pos[t] < 0 || pos[t] >= r.prog->p->max_positions())
      fail("rope: position " + std::to_string(pos[t]) + " is outside the program's [0, " +
           std::to_string(r.prog->p->max_positions()) + ")");
    const float p = static_cast<float>(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = inv[static_cast<size_t>(i)] * p;
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < op->num_heads(); ++h) {
        float* xh = o + t * stride + h * hd;
        const float x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * c + (-x2) * s;
        xh[i + half] = x2 * c + x1 * s;
      }
    }
  }
}

void run_op(const Run& r, const fb::Op* op) {
  const Kernels& K = *r.prog->k;
  const int x = in(op, 0), y = out(op, 0);
  const int64_t n = r.rows(x) * r.cols(x);
  const float* a = r.f(x);
  float* o = r.f(y);
  switch (op->code()) {
    case fb::OpCode_Embedding: {
      const int ids = in(op, 1);
      const int64_t vocab = r.t(x)->rows(), h = r.cols(x), m = r.rows(ids);
      for (int64_t t = 0; t < m; ++t) {
        const int32_t id = r.i(ids)[t];
        if (id < 0 || id >= vocab)
          fail("token id " + std::to_string(id) + " at row " + std::to_string(t) + " is outside the embedding table [0, " +
               std::to_string(vocab) + ")");
        if (r.bf16(x)) {
          const uint16_t* row = r.w16(x) + id * h;
          for (int64_t j = 0; j < h; ++j) o[t * h + j] = bf16_to_f32(row[j]);
        } else {
          std::memcpy(o + t * h, a + id * h, static_cast<size_t>(h) * 4);
        }
      }
      return;
    }
    case fb::OpCode_Linear: {
      const int w = in(op, 1), b = in(op, 2);
      if (r.bf16(w))
        K.linear_bf16(a, r.rows(x), r.cols(x), r.w16(w), b >= 0 ? r.f(b) : nullptr, r.t(w)->rows(), o);
      else
        K.linear(a, r.rows(x), r.cols(x), r.f(w), b >= 0 ? r.f(b) : nullptr, r.t(w)->rows(), o);
      return;
    }
    case fb::OpCode_RmsNorm: {
      const int64_t g = r.cols(in(op, 1));
      K.rms_norm(a, n / g, g, r.f(in(op, 1)), static_cast<float>(op->eps()), static_cast<float>(op->weight_offset()), o);
      return;
    }
    case fb::OpCode_LayerNorm: {
      const int b = in(op, 2);
      K.layer_norm(a, r.rows(x), r.cols(x), r.f(in(op, 1)), b >= 0 ? r.f(b) : nullptr, static_cast<float>(op->eps()), o);
      return;
    }
    case fb::OpCode_Add: {
      const float* b = r.f(in(op, 1));
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
      return;
    }
    case fb::OpCode_Mul: {
      const float* b = r.f(in(op, 1));
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
      return;
    }
    case fb::OpCode_Silu:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(silu(a[i]));
      return;
    case fb::OpCode_GeluErf:
      for (int64_t i = 0; i < n; ++i) o[i] = static_cast<float>(0.5 * a[i] * std::erfc(-a[i] / std::sqrt(2.0)));
      return;
    case fb::OpCode_GeluTanh:
      for (int64_t i = 0; i < n; ++i) {
        const double v = a[i], u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v);
        o[i] = static_cast<float>(0.5 * v * (1.0 + std::tanh(u)));
      }
      return;
    case fb::OpCode_Scale: {
      const float f = static_cast<float>(op->factor());
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] * f;
      return;
    }
    case fb::OpCode_Softcap: {
      const float cap = static_cast<float>(op->cap());
      for (int64_t i = 0; i < n; ++i) o[i] = cap * std::tanh(a[i] / cap);
      return;
    }
    case fb::OpCode_SiluAndMul: {
      const int up = in(op, 1);
      const int64_t rows = r.rows(y), w = r.cols(y);
      const int64_t stride = up >= 0 ? w : 2 * w;
      const float* u = up >= 0 ? r.f(up) : a + w;
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t i = 0; i < w; ++i)
          o[t * w + i] = static_cast<float>(static_cast<double>(static_cast<float>(silu(a[t * stride + i]))) * u[t * stride + i]);
      return;
    }
    case fb::OpCode_SplitColumns: {
      const int64_t rows = r.rows(x), stride = r.cols(x);
      int64_t col = 0;
      for (uint32_t j = 0; j < op->outputs()->size(); ++j) {
        const int64_t w = r.cols(out(op, j));
        for (int64_t t = 0; t < rows; ++t) std::memcpy(r.f(out(op, j)) + t * w, a + t * stride + col, static_cast<size_t>(w) * 4);
        col += w;
      }
      return;
    }
    case fb::OpCode_GatherRows: {
      const int idx = in(op, 1);
      const int64_t rows = r.rows(x), h = r.cols(x), m = r.rows(idx);
      for (int64_t t = 0; t < m; ++t) {
        const int32_t j = r.i(idx)[t];
        if (j < 0 || j >= rows) fail("gather_rows: index " + std::to_string(j) + " outside [0, " + std::to_string(rows) + ")");
        std::memcpy(o + t * h, a + j * h, static_cast<size_t>(h) * 4);
      }
      return;
    }
    case fb::OpCode_Rope: {
      if (op->rope_dynamic()) {
        run_dynamic_rope(r, op);
        return;
      }
      // x, positions, cos table, sin table ([max_positions, rotary_dim / 2], × attention scaling)
      const int32_t* pos = r.i(in(op, 1));
      const float *cs = r.f(in(op, 2)), *sn = r.f(in(op, 3));
      const int64_t rows = r.rows(x), stride = r.cols(x), half = op->rotary_dim() / 2, hd = op->head_dim();
      const int64_t table_rows = r.t(in(op, 2))->rows();
      if (o != a) std::memcpy(o, a, static_cast<size_t>(n) * 4);
      for (int64_t t = 0; t < rows; ++t) {
        if (pos[t] < 0 || pos[t] >= table_rows)
          fail("rope: position " + std::to_string(pos[t]) + " is outside the program's [0, " + std::to_string(table_rows) + ")");
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[pos[t] * half + i], s = sn[pos[t] * half + i];
          for (int64_t h = 0; h < op->num_heads(); ++h) {
            float* xh = o + t * stride + h * hd;
            const float x1 = xh[i], x2 = xh[i + half];
            xh[i] = x1 * c + (-x2) * s;
            xh[i + half] = x2 * c + x1 * s;
          }
        }
      }
      return;
    }
    case fb::OpCode_Attention:
      run_attention(r, op);
      return;
    case fb::OpCode_Moe:
      run_moe(r, op);
      return;
  }
  fail(std::string("unknown op code ") + std::to_string(static_cast<int>(op->code())));
}

// ── load-time checks: everything the run loop indexes is in range ──
void check(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

// The shapes each op's loop relies on, so that a damaged or hand-made file
// cannot make a kernel read or write outside its tensors.
void check_shapes(const fb::Program* p, const fb::Op* op, const std::string& where) {
  auto T = [&](uint32_t i, bool output = false) {
    return p->tensors()->Get(static_cast<uint32_t>(output ? op->outputs()->Get(i) : op->inputs()->Get(i)));
  };
  auto has = [&](uint32_t i) { return i < op->inputs()->size() && op->inputs()->Get(i) >= 0; };
  auto same_rows = [](const fb::Tensor* a, const fb::Tensor* b) {
    return a->row_kind() == b->row_kind() && (a->row_kind() != fb::RowKind_Fixed || a->rows() == b->rows());
  };
  // a weight input; bf16 only where the kernel widens it (a linear's weight, an embedding table, a moe's matrices)
  auto weight = [&](uint32_t i, bool bf16_ok = false) {
    check(T(i)->kind() == fb::TensorKind_Weight, where + ": input " + std::to_string(i) + " must be a weight");
    check(T(i)->type() == fb::ElemType_F32 || (bf16_ok && T(i)->type() == fb::ElemType_BF16),
          where + ": input " + std::to_string(i) + " must be an f32 weight");
  };
  auto arena_f32 = [&](const fb::Tensor* t) { check(t->kind() == fb::TensorKind_Arena && t->type() == fb::ElemType_F32, where + ": expects an f32 activation"); };
  auto arena_i32 = [&](const fb::Tensor* t) { check(t->kind() == fb::TensorKind_Arena && t->type() == fb::ElemType_I32, where + ": expects i32 indices"); };
  const fb::Tensor* y = T(0, true);
  arena_f32(y);
  check(op->outputs()->size() == (op->code() == fb::OpCode_SplitColumns ? 3u : 1u), where + ": wrong number of outputs");
  switch (op->code()) {
    case fb::OpCode_Embedding:
      weight(0, true);
      arena_i32(T(1));
      check(same_rows(T(1), y) && y->cols() == T(0)->cols(), where + ": output shape");
      return;
    case fb::OpCode_Linear:
      arena_f32(T(0));
      weight(1, true);
      check(T(0)->cols() == T(1)->cols() && y->cols() == T(1)->rows() && same_rows(T(0), y), where + ": shapes do not match the weight");
      if (has(2)) {
        weight(2);
        check(T(2)->rows() * T(2)->cols() == T(1)->rows(), where + ": bias size");
      }
      return;
    case fb::OpCode_RmsNorm:
      arena_f32(T(0));
      weight(1);
      check(T(1)->rows() == 1 && T(0)->cols() % T(1)->cols() == 0 && y->cols() == T(0)->cols() && same_rows(T(0), y), where + ": shapes");
      return;
    case fb::OpCode_LayerNorm:
      arena_f32(T(0));
      weight(1);
      check(T(1)->rows() == 1 && T(1)->cols() == T(0)->cols() && y->cols() == T(0)->cols() && same_rows(T(0), y), where + ": shapes");
      if (has(2)) {
        weight(2);
        check(T(2)->rows() * T(2)->cols() == T(0)->cols(), where + ": bias size");
      }
      return;
    case fb::OpCode_Add:
    case fb::OpCode_Mul:
      arena_f32(T(1));
      check(same_rows(T(0), T(1)) && T(0)->cols() == T(1)->cols(), where + ": inputs differ in shape");
      [[fallthrough]];
    case fb::OpCode_Silu:
    case fb::OpCode_GeluErf:
    case fb::OpCode_GeluTanh:
    case fb::OpCode_Scale:
    case fb::OpCode_Softcap:
      arena_f32(T(0));
      check(same_rows(T(0), y) && T(0)->cols() == y->cols(), where + ": output shape");
      return;
    case fb::OpCode_SiluAndMul:
      arena_f32(T(0));
      check(same_rows(T(0), y), where + ": output rows");
      if (has(1)) {
        arena_f32(T(1));
        check(T(0)->cols() == y->cols() && T(1)->cols() == y->cols() && same_rows(T(0), T(1)), where + ": shapes");
      } else {
        check(T(0)->cols() == 2 * y->cols(), where + ": a gate_up input must be twice the output width");
      }
      return;
    case fb::OpCode_SplitColumns: {
      arena_f32(T(0));
      int64_t cols = 0;
      for (uint32_t j = 0; j < op->outputs()->size(); ++j) {
        arena_f32(T(j, true));
        check(same_rows(T(0), T(j, true)), where + ": output rows");
        cols += T(j, true)->cols();
      }
      check(cols == T(0)->cols(), where + ": outputs do not cover the input's columns");
      return;
    }
    case fb::OpCode_GatherRows:
      arena_f32(T(0));
      arena_i32(T(1));
      check(same_rows(T(1), y) && y->cols() == T(0)->cols(), where + ": output shape");
      return;
    case fb::OpCode_Rope:
      arena_f32(T(0));
      arena_i32(T(1));
      if (op->rope_dynamic()) {
        check(same_rows(T(0), y) && same_rows(T(0), T(1)) && y->cols() == T(0)->cols() &&
                  T(0)->cols() == int64_t{op->num_heads()} * op->head_dim(),
              where + ": shapes");
        return;
      }
      weight(2);
      weight(3);
      check(same_rows(T(0), y) && same_rows(T(0), T(1)) && y->cols() == T(0)->cols() &&
                T(0)->cols() == int64_t{op->num_heads()} * op->head_dim() && T(2)->rows() == T(3)->rows() &&
                T(2)->cols() == T(3)->cols(),
            where + ": shapes");
      return;
    case fb::OpCode_Attention:
      for (uint32_t j = 0; j < 3; ++j) arena_f32(T(j));
      arena_i32(T(3));
      check(T(0)->cols() == int64_t{op->num_heads()} * op->head_dim() && y->cols() == T(0)->cols() &&
                T(1)->cols() == int64_t{op->num_kv_heads()} * op->head_dim() && T(2)->cols() == T(1)->cols() &&
                same_rows(T(0), T(1)) && same_rows(T(0), T(2)) && same_rows(T(0), T(3)) && same_rows(T(0), y),
            where + ": shapes");
      return;
    case fb::OpCode_Moe: {
      arena_f32(T(0));
      for (uint32_t j = 1; j <= 3; ++j) weight(j, true);
      const int64_t h = T(0)->cols(), e = T(1)->rows();
      check(T(1)->cols() == h && e >= 1 && T(2)->cols() == h && T(2)->rows() % (2 * e) == 0 && T(2)->rows() >= 2 * e,
            where + ": router must be [E, H] and gate_up [E·2I, H] with H the input width");
      const int64_t i = T(2)->rows() / (2 * e);
      check(T(3)->rows() == e * h && T(3)->cols() == i, where + ": down must be [E·H, I] matching gate_up");
      check(op->top_k() >= 1 && op->top_k() <= e, where + ": top_k " + std::to_string(op->top_k()) + " outside [1, " + std::to_string(e) + "]");
      check(op->activation() <= fb::Activation_MAX, where + ": unknown activation");
      check(same_rows(T(0), y) && y->cols() == h, where + ": output shape");
      check(has(4) == has(5), where + ": shared and shared_gate come together");
      if (has(4)) {
        arena_f32(T(4));
        check(same_rows(T(0), T(4)) && T(4)->cols() == h, where + ": shared must be shaped like x");
        weight(5);
        check(T(5)->rows() == 1 && T(5)->cols() == h, where + ": shared_gate must be [1, H]");
      }
      return;
    }
  }
}

void validate(lp_program& prog) {
  const fb::Program* p = prog.p;
  check(p->tensors() && p->weights() && p->ops() && p->kv_layers() && p->inputs() && p->outputs(),
        "the program lacks tensors, weights, ops, kv_layers, inputs or outputs");
  check(p->max_tokens() >= 1 && p->max_positions() >= 1 && p->vocab_size() >= 1,
        "max_tokens, max_positions and vocab_size must be positive");
  const uint32_t nt = p->tensors()->size();
  // Every weight's floats: inline in the flatbuffer (the verifier checked its
  // bounds) or a range of the mapped weights file, checked here.
  const uint64_t payload = prog.weights_file.size >= lpte::kWeightsHeaderBytes ? prog.weights_file.size - lpte::kWeightsHeaderBytes : 0;
  prog.weights.assign(p->weights()->size(), nullptr);
  for (uint32_t i = 0; i < p->weights()->size(); ++i) {
    const fb::WeightData* w = p->weights()->Get(i);
    const std::string name = "weight " + std::to_string(i) + (w->name() ? " (" + w->name()->str() + ")" : "");
    check(w->type() == fb::ElemType_F32 || w->type() == fb::ElemType_BF16, name + ": weights are f32 or bf16");
    const bool bf16 = w->type() == fb::ElemType_BF16;
    if (w->external_bytes() == 0) {
      check(bf16 ? w->data_bf16() != nullptr : w->data() != nullptr, name + ": no inline data and no external range");
      prog.weights[i] = bf16 ? static_cast<const void*>(w->data_bf16()->data()) : static_cast<const void*>(w->data()->data());
      continue;
    }
    check(prog.weights_file.data != nullptr, name + ": stored in a weights file, but the program names none");
    check((w->data() == nullptr || w->data()->size() == 0) && (w->data_bf16() == nullptr || w->data_bf16()->size() == 0),
          name + ": has both inline data and an external range");
    check(w->external_offset() % 4 == 0, name + ": external offset " + std::to_string(w->external_offset()) + " is not 4-byte aligned");
    check(w->external_offset() <= payload && w->external_bytes() <= payload - w->external_offset(),
          name + ": bytes [" + std::to_string(w->external_offset()) + ", +" + std::to_string(w->external_bytes()) +
              ") lie outside the weights file's " + std::to_string(payload) + " payload bytes (" + prog.weights_path + ")");
    prog.weights[i] = reinterpret_cast<const float*>(prog.weights_file.data + lpte::kWeightsHeaderBytes + w->external_offset());
  }
  auto elem_bytes = [](const fb::WeightData* w) -> uint64_t { return w->type() == fb::ElemType_BF16 ? 2 : 4; };
  auto weight_elems = [&](const fb::WeightData* w) -> int64_t {
    if (w->external_bytes()) return static_cast<int64_t>(w->external_bytes() / elem_bytes(w));
    return w->type() == fb::ElemType_BF16 ? static_cast<int64_t>(w->data_bf16()->size()) : static_cast<int64_t>(w->data()->size());
  };
  auto tensor_bytes = [&](const fb::Tensor* t) {
    const int64_t rows = t->row_kind() == fb::RowKind_Fixed ? t->rows() : p->max_tokens();
    return rows * t->cols() * 4;
  };
  for (uint32_t i = 0; i < nt; ++i) {
    const fb::Tensor* t = p->tensors()->Get(i);
    const std::string name = "tensor " + std::to_string(i) + (t->name() ? " (" + t->name()->str() + ")" : "");
    check(t->cols() >= 1 && t->rows() >= 0, name + ": bad shape");
    if (t->kind() == fb::TensorKind_Weight) {
      check(t->weight() >= 0 && static_cast<uint32_t>(t->weight()) < p->weights()->size(), name + ": no such weight");
      const auto* w = p->weights()->Get(static_cast<uint32_t>(t->weight()));
      check(t->type() == w->type(), name + ": its type differs from its weight data's");
      check(w->external_bytes() % elem_bytes(w) == 0 && weight_elems(w) == t->rows() * t->cols() &&
                t->row_kind() == fb::RowKind_Fixed,
            name + ": weight data (" + std::to_string(weight_elems(w)) + " values) does not match its shape " +
                std::to_string(t->rows()) + "×" + std::to_string(t->cols()));
    } else {
      check(t->offset() % 4 == 0 && t->offset() + static_cast<uint64_t>(tensor_bytes(t)) <= p->arena_bytes(),
            name + ": lies outside the arena of " + std::to_string(p->arena_bytes()) + " bytes");
    }
  }
  auto tid = [&](int id, bool optional, const std::string& where) {
    check((optional && id == -1) || (id >= 0 && static_cast<uint32_t>(id) < nt), where + ": tensor id " + std::to_string(id) + " out of range");
  };
  for (uint32_t i = 0; i < p->ops()->size(); ++i) {
    const fb::Op* op = p->ops()->Get(i);
    const std::string where = std::string("op ") + std::to_string(i) + " (" + op_name(op->code()) + ")";
    check(op->code() <= fb::OpCode_MAX, where + ": unknown op code");
    check(op->inputs() && op->outputs() && op->inputs()->size() >= 1 && op->outputs()->size() >= 1, where + ": no inputs or outputs");
    for (uint32_t j = 0; j < op->inputs()->size(); ++j) tid(op->inputs()->Get(j), j > 0, where);
    for (uint32_t j = 0; j < op->outputs()->size(); ++j) {
      tid(op->outputs()->Get(j), false, where);
      check(p->tensors()->Get(static_cast<uint32_t>(op->outputs()->Get(j)))->kind() == fb::TensorKind_Arena, where + ": writes a weight");
    }
    const uint32_t need = op->code() == fb::OpCode_Attention || op->code() == fb::OpCode_Moe ? 4
                          : op->code() == fb::OpCode_Rope ? (op->rope_dynamic() ? 2 : 4)
                          : (op->code() == fb::OpCode_Linear || op->code() == fb::OpCode_Embedding || op->code() == fb::OpCode_Add ||
                             op->code() == fb::OpCode_Mul || op->code() == fb::OpCode_RmsNorm || op->code() == fb::OpCode_LayerNorm ||
                             op->code() == fb::OpCode_GatherRows) ? 2 : 1;
    check(op->inputs()->size() >= need, where + ": needs " + std::to_string(need) + " inputs");
    for (uint32_t j = 0; j < need; ++j) check(op->inputs()->Get(j) >= 0, where + ": input " + std::to_string(j) + " is absent");
    check_shapes(p, op, where);
    if (op->code() == fb::OpCode_Attention) {
      check(op->layer() >= 0 && static_cast<uint32_t>(op->layer()) < p->kv_layers()->size(), where + ": no such KV layer");
      const auto* l = p->kv_layers()->Get(static_cast<uint32_t>(op->layer()));
      check(op->num_kv_heads() > 0 && op->num_heads() % op->num_kv_heads() == 0 && op->head_dim() > 0 &&
                l->kv_row() == int64_t{op->num_kv_heads()} * op->head_dim(),
            where + ": heads do not match the KV layer");
      check(l->k_offset() + l->kv_row() * p->max_positions() <= p->state_floats() &&
                l->v_offset() + l->kv_row() * p->max_positions() <= p->state_floats(),
            where + ": KV layer outside the state buffer");
    }
    if (op->code() == fb::OpCode_Rope && op->rope_dynamic())
      check(op->rotary_dim() >= 4 && op->rotary_dim() % 2 == 0 && op->rotary_dim() <= op->head_dim() && op->theta() > 0 &&
                std::isfinite(op->theta()) && op->factor() > 0 && std::isfinite(op->factor()) &&
                op->max_position_embeddings() >= 1,
            where + ": dynamic rope needs an even rotary_dim in [4, head_dim], positive theta and factor, and "
                    "max_position_embeddings");
    else if (op->code() == fb::OpCode_Rope)
      check(op->rotary_dim() % 2 == 0 && op->rotary_dim() <= op->head_dim() &&
                p->tensors()->Get(static_cast<uint32_t>(op->inputs()->Get(2)))->cols() == op->rotary_dim() / 2,
            where + ": rotary tables do not match rotary_dim");
  }
  auto binding = [&](const flatbuffers::Vector<flatbuffers::Offset<fb::Binding>>* v, const char* name) {
    for (uint32_t i = 0; i < v->size(); ++i)
      if (v->Get(i)->name() && v->Get(i)->name()->str() == name) {
        tid(v->Get(i)->tensor(), false, name);
        return v->Get(i)->tensor();
      }
    fail(std::string("the program has no binding '") + name + "'");
  };
  prog.ids = binding(p->inputs(), "input_ids");
  prog.positions = binding(p->inputs(), "positions");
  prog.indices = binding(p->inputs(), "logits_indices");
  prog.logits = binding(p->outputs(), "logits");
  // A static program's bindings are all max_tokens rows (the runtime pads).
  auto io = [&](int id, fb::RowKind rows, fb::ElemType type, int64_t cols, const char* name) {
    const fb::Tensor* t = p->tensors()->Get(static_cast<uint32_t>(id));
    const bool rows_ok = p->static_rows() ? t->row_kind() == fb::RowKind_Fixed && t->rows() == p->max_tokens() : t->row_kind() == rows;
    check(t->kind() == fb::TensorKind_Arena && rows_ok && t->type() == type && t->cols() == cols,
          std::string("binding '") + name + "' has the wrong kind, rows, type or width");
  };
  io(prog.ids, fb::RowKind_Tokens, fb::ElemType_I32, 1, "input_ids");
  io(prog.positions, fb::RowKind_Tokens, fb::ElemType_I32, 1, "positions");
  io(prog.indices, fb::RowKind_Selected, fb::ElemType_I32, 1, "logits_indices");
  io(prog.logits, fb::RowKind_Selected, fb::ElemType_F32, p->vocab_size(), "logits");
}

// Maps `path` read-only; `what` names the file in errors.
void map_file(const std::string& path, const std::string& what, Mapping* m) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open " + what + " " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(what + " " + path + " is not a regular file");
  }
  if (st.st_size <= 0) {
    ::close(fd);
    fail(what + " " + path + " is empty");
  }
  void* data = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (data == MAP_FAILED) fail("cannot map " + what + " " + path + ": " + std::strerror(err));
  m->data = static_cast<const uint8_t*>(data);
  m->size = static_cast<size_t>(st.st_size);
}

// The sidecar named by the program: next to it, its header and size as the
// program recorded them (the payload hash is compared, not recomputed).
void map_weights(lp_program& prog, const std::string& program_path) {
  const fb::WeightsFile* wf = prog.p->weights_file();
  if (!wf) return;
  const std::string name = wf->path() ? wf->path()->str() : "";
  if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..")
    fail("the program's weights file name '" + name + "' must be a plain file name (next to the program)");
  const size_t slash = program_path.rfind('/');
  prog.weights_path = (slash == std::string::npos ? std::string() : program_path.substr(0, slash + 1)) + name;
  map_file(prog.weights_path, "weights file", &prog.weights_file);
  const Mapping& m = prog.weights_file;
  if (m.size != wf->bytes())
    fail("weights file " + prog.weights_path + " has " + std::to_string(m.size) + " bytes, the program expects " +
         std::to_string(wf->bytes()) + " (truncated, or from another export)");
  if (m.size < lpte::kWeightsHeaderBytes) fail("weights file " + prog.weights_path + " is shorter than its header");
  lpte::WeightsHeader h;
  std::memcpy(&h, m.data, sizeof h);
  if (std::memcmp(h.magic, lpte::kWeightsMagic, sizeof h.magic) != 0)
    fail("weights file " + prog.weights_path + " is not a loom portable weights file (bad magic)");
  if (h.payload_offset != lpte::kWeightsHeaderBytes || h.payload_bytes != m.size - lpte::kWeightsHeaderBytes)
    fail("weights file " + prog.weights_path + ": its header's payload (offset " + std::to_string(h.payload_offset) + ", " +
         std::to_string(h.payload_bytes) + " bytes) does not match the file");
  if (h.payload_hash != wf->payload_hash())
    fail("weights file " + prog.weights_path + " belongs to another export (payload hash differs from the program's)");
}

std::unique_ptr<lp_program> load(const char* path) {
  auto prog = std::make_unique<lp_program>();
  if (!path) fail("no path given");
  map_file(path, "program", &prog->file);
  const uint8_t* data = prog->file.data;
  const size_t size = prog->file.size;
  if (size < 8 || !fb::ProgramBufferHasIdentifier(data))
    fail(std::string(path) + ": not a loom portable program (file identifier is not LPTE)");
  flatbuffers::Verifier v(data, size, 64, 100000000);
  if (!fb::VerifyProgramBuffer(v)) fail(std::string(path) + ": the flatbuffer is corrupt (verifier failed)");
  prog->p = fb::GetProgram(data);
  if (prog->p->version() < 1 || prog->p->version() > 2)
    fail(std::string(path) + ": program version " + std::to_string(prog->p->version()) + " is not 1 or 2");
  const std::string backend = prog->p->backend() ? prog->p->backend()->str() : "";
  if (backend == "reference") prog->k = &reference_kernels();
  else if (backend == "cpu_simd") prog->k = &simd_kernels();
  else fail(std::string(path) + ": unknown backend '" + backend + "' (reference, cpu_simd)");
  try {
    map_weights(*prog, path);
    validate(*prog);
  } catch (const Fail& e) {
    fail(std::string(path) + ": " + e.what);
  }
  prog->arena.assign(prog->p->arena_bytes() / 4 + 1, 0.0f);
  prog->state.assign(prog->p->state_floats(), 0.0f);
  return prog;
}

void run(lp_program* prog, const int32_t* tokens, int64_t n, int64_t start, float* logits, bool all) {
  if (!tokens || !logits) fail("tokens and logits_out must not be null");
  if (n < 1) fail("n must be ≥ 1, got " + std::to_string(n));
  if (start < 0 || start + n > prog->p->max_positions())
    fail("positions [" + std::to_string(start) + ", " + std::to_string(start + n) + ") exceed the program's " +
         std::to_string(prog->p->max_positions()) + " positions");
  const int64_t T = prog->p->max_tokens(), V = prog->p->vocab_size();
  const bool fixed = prog->p->static_rows();
  for (int64_t done = 0; done < n; done += T) {
    Run r{prog};
    r.seq_len = start + n;
    const int64_t real = std::min(T, n - done);
    const bool last_chunk = done + real == n;
    // A static program always runs T rows: the pad rows repeat the chunk's last
    // token at its position, so they compute (and write to the KV cache) exactly
    // what that token does; the logits rows beyond the wanted ones repeat the
    // last wanted row.
    r.tokens = fixed ? T : real;
    const int64_t wanted = all ? real : 1;
    r.selected = fixed ? T : wanted;
    int32_t* ids = r.i(prog->ids);
    int32_t* pos = r.i(prog->positions);
    int32_t* idx = r.i(prog->indices);
    for (int64_t t = 0; t < r.tokens; ++t) {
      const int64_t src = std::min(t, real - 1);
      ids[t] = tokens[done + src];
      pos[t] = static_cast<int32_t>(start + done + src);
    }
    for (int64_t t = 0; t < r.selected; ++t) idx[t] = static_cast<int32_t>(all ? std::min(t, real - 1) : real - 1);
    for (uint32_t i = 0; i < prog->p->ops()->size(); ++i) {
      const fb::Op* op = prog->p->ops()->Get(i);
      try {
        run_op(r, op);
      } catch (const Fail& e) {
        fail(std::string("op ") + std::to_string(i) + " (" + op_name(op->code()) + (op->scope() ? " in " + op->scope()->str() : "") +
             "): " + e.what);
      }
    }
    if (all) std::memcpy(logits + done * V, r.f(prog->logits), static_cast<size_t>(real * V) * 4);
    else if (last_chunk) std::memcpy(logits, r.f(prog->logits), static_cast<size_t>(V) * 4);
  }
}

int run_c(lp_program* prog, const int32_t* tokens, int64_t n, int64_t start, float* logits, bool all) {
  if (!prog) return -1;
  prog->error.clear();
  try {
    run(prog, tokens, n, start, logits, all);
    return 0;
  } catch (const Fail& e) {
    prog->error = e.what;
  } catch (const std::exception& e) {
    prog->error = e.what();
  }
  return -1;
}

}  // namespace
}  // namespace lp

extern "C" {

lp_program* lp_program_load(const char* path) {
  lp::g_load_error.clear();
  try {
    return lp::load(path).release();
  } catch (const lp::Fail& e) {
    lp::g_load_error = e.what;
  } catch (const std::exception& e) {
    lp::g_load_error = std::string(path ? path : "(null)") + ": " + e.what();
  }
  return nullptr;
}

const char* lp_last_error(void) { return lp::g_load_error.c_str(); }

int lp_run(lp_program* p, const int32_t* tokens, int64_t n, int64_t start_pos, float* logits_out) {
  return lp::run_c(p, tokens, n, start_pos, logits_out, false);
}

int lp_run_all(lp_program* p, const int32_t* tokens, int64_t n, int64_t start_pos, float* logits_out) {
  return lp::run_c(p, tokens, n, start_pos, logits_out, true);
}

const char* lp_error(const lp_program* p) { return p ? p->error.c_str() : "no program"; }
size_t lp_program_size(const lp_program* p) { return p ? p->file.size : 0; }
size_t lp_program_weights_file_size(const lp_program* p) { return p ? p->weights_file.size : 0; }
int lp_program_is_static(const lp_program* p) { return p && p->p->static_rows() ? 1 : 0; }

int lp_program_verify_weights(lp_program* p) {
  if (!p) return -1;
  p->error.clear();
  const fb::WeightsFile* wf = p->p->weights_file();
  if (!wf) return 0;
  lpte::PayloadHash h;
  h.update(p->weights_file.data + lpte::kWeightsHeaderBytes, p->weights_file.size - lpte::kWeightsHeaderBytes);
  if (h.digest() == wf->payload_hash()) return 0;
  p->error = "weights file " + p->weights_path + " is damaged: its payload hash differs from the one recorded at export";
  return -1;
}
size_t lp_program_arena_bytes(const lp_program* p) { return p ? p->p->arena_bytes() : 0; }
size_t lp_program_unplanned_bytes(const lp_program* p) { return p ? p->p->unplanned_bytes() : 0; }
size_t lp_program_state_bytes(const lp_program* p) { return p ? p->p->state_floats() * 4 : 0; }
int64_t lp_program_vocab_size(const lp_program* p) { return p ? p->p->vocab_size() : 0; }
int64_t lp_program_max_tokens(const lp_program* p) { return p ? p->p->max_tokens() : 0; }
int64_t lp_program_max_positions(const lp_program* p) { return p ? p->p->max_positions() : 0; }
const char* lp_program_backend(const lp_program* p) { return p && p->p->backend() ? p->p->backend()->c_str() : ""; }
void lp_free(lp_program* p) { delete p; }

}  // extern "C"
