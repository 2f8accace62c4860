// The seams of model code an exporter may replace for one export
// (graph/patch_point.h; export/registries.h register_patch), named like the
// methods Transformers' exporters patch:
//
//   models.<Class>.forward   e.g. models.LlamaRMSNorm.forward, models.LlamaMLP.forward,
//                            models.MixtralSparseMoeBlock.forward (x → y):
//                            ValueId(const UnaryModule&, GraphBuilder&, ValueId x)
//   models.<Class>.forward   attention, e.g. models.LlamaAttention.forward:
//                            ValueId(const SelfAttention&, GraphBuilder&, ValueId x, ValueId positions)
//   models.<Class>.forward   decoder layers, e.g. models.Qwen2DecoderLayer.forward:
//                            ValueId(const DecoderLayer&, GraphBuilder&, ValueId x, ValueId positions)
//
// A replacement receives the original, so it can wrap it. The decoder (every
// architecture but GPT-2, which has its own blocks) calls its layers, their
// norms, attention and MLP/MoE blocks, attention's q/k norms and the final
// norm through these; the point of a class exists once a module of that class
// has been built (a path naming a class no loaded model has is skipped by
// apply_patches, or fails it in strict mode).
#pragma once

#include "loom/models/decoder.h"
#include "loom/models/layers.h"

namespace loom::models {

using UnaryForwardSig = ValueId(const UnaryModule&, GraphBuilder&, ValueId);
using AttentionForwardSig = ValueId(const SelfAttention&, GraphBuilder&, ValueId, ValueId);
using DecoderLayerForwardSig = ValueId(const DecoderLayer&, GraphBuilder&, ValueId, ValueId);

// "models.<class_name>.forward"
std::string forward_patch_path(const Module& m);

// Records m's forward through its class's patch point.
ValueId call_forward(const UnaryModule& m, GraphBuilder& b, ValueId x);
ValueId call_forward(const SelfAttention& m, GraphBuilder& b, ValueId x, ValueId positions);
ValueId call_forward(const DecoderLayer& m, GraphBuilder& b, ValueId x, ValueId positions);

// Creates m's class point now: the decoder declares its children's when it
// builds them, so an export's patches find them before anything is recorded.
void declare_patch_point(const UnaryModule& m);
void declare_patch_point(const SelfAttention& m);
void declare_patch_point(const DecoderLayer& m);

}  // namespace loom::models
