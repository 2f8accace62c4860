// loom's built-in fusions, as the KernelConfig a front end loads a model with
// when the user gives none (LoadOptions::builtin_fusions; the CLI's default,
// `--no-builtin-fusions` turns it off). Each is equal to the unfused graph
// (tests/models/kernels_parity_test.cc) and measured faster where it is on
// (docs/performance.md, bench/fusions_on_off.py).
#pragma once

#include "loom/kernels/kernel_config.h"
#include "loom/models/module.h"

namespace loom::models {

struct BuiltinFusions {
  bool qkv = true;       // "Attention": loom:FusedQKV
  bool gate_up = true;   // "MLP": loom:FusedGateUpMLP
  bool add_norm = true;  // loom:AddRMSNorm on (self_attn, post_attention_layernorm)
};

// The fusions of `which` that fit every module they would touch in this tree:
// FusedQKV when every Attention is loom's SelfAttention; FusedGateUpMLP when
// every MLP is a SiLU-gated decoder-layer MLP (a layer entry covers them all,
// so one gelu MLP or MoE shared expert keeps them all unfused); AddRMSNorm when
// every decoder layer adds the attention's output to the residual before an
// RMSNorm (not Gemma-2's sandwich, not GPT-2's LayerNorm). Empty when none fits.
kernels::KernelConfig builtin_fusion_config(const Module& root, const BuiltinFusions& which = {});

}  // namespace loom::models
