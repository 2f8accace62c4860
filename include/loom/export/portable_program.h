// The portable exporter's in-memory program (the ExecuTorch equivalent's
// lowered program): ops over numbered tensors, f32 weights, a memory plan (one
// arena, an offset per activation), the KV state layout. It is what backend
// preparation (`prepare_for_<name>`) edits and what is serialized to .lpte with
// the flatbuffers schema src/portable/schema/loom_program.fbs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "loom/core/status.h"

namespace loom::exporting {

enum class PortableRows : uint8_t { kFixed, kTokens, kSelected };  // as the schema's RowKind

struct PortableTensor {
  std::string name;
  bool is_weight = false;
  bool is_i32 = false;
  bool is_bf16 = false;  // a weight stored in bf16 (linear weights, embedding tables)
  PortableRows row_kind = PortableRows::kFixed;
  int64_t rows = 1, cols = 1;  // rows: for kFixed; otherwise at most max_tokens
  uint64_t offset = 0;         // arena byte offset (set by memory planning)
  int weight = -1;             // index into weights
};

struct PortableOp {
  std::string op;  // the loom op ("linear", "gelu", …); the schema's OpCode follows from it
  std::string scope;
  std::vector<int> inputs, outputs;  // tensor ids; -1 = absent optional input
  double eps = 0, weight_offset = 0, factor = 0, cap = 0, scale = 0, softcap = 0;
  int layer = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0, rotary_dim = 0;
  int64_t sliding_window = 0;
  bool gelu_tanh = false;
  std::vector<int64_t> sizes;
  // rope "dynamic" (NTK): no tables, the runtime computes the frequencies per run
  bool rope_dynamic = false;
  double theta = 0;
  int64_t max_position_embeddings = 0;
  // moe: routing and the experts' activation ("silu", "gelu" (erf) or "gelu_tanh")
  int64_t top_k = 0;
  bool norm_topk_prob = false;
  std::string activation;
};

struct PortableKvLayer {
  int64_t kv_row = 0;
  uint64_t k_offset = 0, v_offset = 0;  // floats into the state buffer
};

struct PortableProgram {
  std::string backend;  // set by prepare_for_<backend>: the kernels the runtime picks
  std::string model_type;
  int64_t vocab_size = 0, max_tokens = 0, max_positions = 0;
  bool static_rows = false;  // every row count fixed to max_tokens (a static program)
  std::vector<PortableTensor> tensors;
  struct Weight {
    std::string name;
    std::vector<float> f32;        // the values, unless stored in bf16:
    std::vector<uint16_t> bf16;    // exactly the checkpoint's bf16 values
    uint64_t bytes() const { return f32.size() * 4 + bf16.size() * 2; }
  };
  std::vector<Weight> weights;
  std::vector<PortableOp> ops;
  std::vector<PortableKvLayer> kv_layers;
  std::map<std::string, int> inputs, outputs;  // name → tensor
  std::map<std::string, std::string> metadata;
  uint64_t arena_bytes = 0, unplanned_bytes = 0, state_floats = 0;
  uint64_t arena_alignment = 64;  // bytes; backend preparation may raise it
};

// ── backend preparation, registered per name ──
using PortablePrepareFn = std::function<Status(PortableProgram&)>;
void register_portable_backend(const std::string& name, PortablePrepareFn prepare);
// The registered names ("reference", "cpu_simd", …), sorted.
std::vector<std::string> portable_backends();
// Runs `name`'s preparation; an unknown name is an error listing the known ones.
Status prepare_for_backend(const std::string& name, PortableProgram& program);

// The built-in preparations: the scalar reference kernels, and the vectorized
// loops (64-byte aligned arena).
Status prepare_for_reference(PortableProgram& program);
Status prepare_for_cpu_simd(PortableProgram& program);

// Liveness-based planning: each arena tensor gets an offset; tensors whose
// lifetimes do not overlap share memory. Sets arena_bytes and unplanned_bytes.
Status plan_memory(PortableProgram& program);

}  // namespace loom::exporting
