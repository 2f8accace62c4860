// Weight rules: how checkpoint keys map to a model's parameters, the C++ form of
// Transformers' WeightRenaming / WeightConverter (conversion_mapping.py). Rules
// are plain values owned by whoever builds a plan (a model instance, a kernel
// Layout); nothing is registered globally.
//
//   WeightRenaming{"LayerNorm.gamma", "LayerNorm.weight"}
//   WeightRenaming{"^transformer.h.*", "model.layers.*"}
//   WeightConverter{{"self_attn.qkv_proj"}, {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"},
//                   {Chunk(0)}}
//   WeightConverter{{"block_sparse_moe.experts.*.w1.weight", "block_sparse_moe.experts.*.w3.weight"},
//                   {"mlp.experts.gate_up_proj"}, {MergeModulelist(0), Concatenate(1)}}
//
// Patterns are WeightPattern globs. Stars pair up in order between a
// converter's sources and targets; a source star beyond the targets' count
// enumerates a list (the experts above, ordered numerically), and a target star
// beyond the sources' count is filled from the model's expected names (the
// reverse, SplitModulelist direction).
//
// Renamings apply first, in order, each to the key the previous ones produced
// (replacing the matched run, the target's stars filled with the captures).
// Converters then match the renamed keys; one key may feed only one converter.
#pragma once

#include <string>
#include <variant>
#include <vector>

#include "loom/weights/conversion_ops.h"

namespace loom {

struct WeightRenaming {
  std::string source;
  std::string target;
  // An optional rule may match nothing (legacy spellings a checkpoint may or
  // may not use); a required one that matches nothing is a compile error.
  bool optional = false;
  std::string name;  // shown in messages when set

  std::string describe() const;
};

struct WeightConverter {
  std::vector<std::string> sources;
  std::vector<std::string> targets;
  std::vector<ConversionOp> operations;
  bool optional = false;
  std::string name;

  std::string describe() const;
};

using WeightRule = std::variant<WeightRenaming, WeightConverter>;
using WeightRules = std::vector<WeightRule>;

std::string describe(const WeightRule& rule);

}  // namespace loom
