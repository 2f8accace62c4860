// Kernel layer names: the names KernelConfig keys on. A module declares one
// (models/module.h layer_name(), e.g. LlamaRMSNorm → "RMSNorm"), as Transformers'
// @use_kernel_forward_from_hub("RMSNorm") does, so one config entry covers every
// architecture's norm class.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace loom::kernels {

// RMSNorm LayerNorm MLP SiLUAndMul GeluAndMul rotary_pos_emb Attention Linear
// Embedding MoE.
const std::vector<std::string>& kernel_layer_names();
bool is_kernel_layer_name(std::string_view name);
// "RMSNorm, LayerNorm, …" for error messages.
std::string kernel_layer_names_list();

// A fused kernel provides an ordered tuple of layers, written "RMSNorm+MLP".
std::string fused_layer_key(const std::vector<std::string>& layers);

}  // namespace loom::kernels
