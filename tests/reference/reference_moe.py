"""Sparse mixture-of-experts MLPs for the reference: MixtralSparseMoeBlock (modeling_mixtral.py),
Qwen2MoeSparseMoeBlock (modeling_qwen2_moe.py), Qwen3MoeSparseMoeBlock (modeling_qwen3_moe.py) and
GptOssMLP (modeling_gpt_oss.py, see gpt_oss_block),
on the per-expert checkpoint layout (Mixtral: block_sparse_moe.experts.M.w1/w3/w2; Qwen2-MoE and
Qwen3-MoE: mlp.experts.M.gate_proj/up_proj/down_proj; Qwen2-MoE also mlp.shared_expert.* and
mlp.shared_expert_gate).

Routing as upstream: router logits = gate(x); softmax over all experts in f32; top-k;
renormalise the k weights (Mixtral always, Qwen2-MoE and Qwen3-MoE iff norm_topk_prob); cast to
the compute dtype; each hit expert's MLP output times its weight is index_add_-ed into the result
in increasing expert order. Qwen2-MoE adds sigmoid(shared_expert_gate(x)) * shared_expert(x);
Qwen3-MoE has no shared expert.
"""

import torch
import torch.nn.functional as F

# Configuration defaults (configuration_mixtral.py, configuration_qwen2_moe.py) of the MoE fields.
MIXTRAL_DEFAULTS = dict(num_local_experts=8, num_experts_per_tok=2)
QWEN2_MOE_DEFAULTS = dict(num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
                          shared_expert_intermediate_size=5632, norm_topk_prob=False, decoder_sparse_step=1,
                          mlp_only_layers=None, qkv_bias=True)
# configuration_gpt_oss.py (swiglu_alpha / swiglu_limit: fields of newer configs, the constants
# GptOssExperts hard-codes in older Transformers).
GPT_OSS_DEFAULTS = dict(num_local_experts=128, num_experts_per_tok=4, swiglu_alpha=1.702, swiglu_limit=7.0)
# configuration_qwen3_moe.py: no shared expert, no qkv_bias (Qwen3's attention_bias instead).
QWEN3_MOE_DEFAULTS = dict(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768, norm_topk_prob=False,
                          decoder_sparse_step=1, mlp_only_layers=None)


class MoeConfig:
    def __init__(self, model_type, c, num_layers, intermediate_size):
        self.mixtral = model_type == "mixtral"
        self.gpt_oss = model_type == "gpt_oss"
        if self.gpt_oss:  # GptOssMLP: a biased router, biased experts, every layer sparse
            self.num_experts = int(c["num_local_experts"])
            self.top_k = int(c["num_experts_per_tok"])
            self.expert_size = intermediate_size
            self.norm_topk_prob = None  # softmax over the top-k logits instead (gpt_oss_block)
            self.shared_size = 0
            self.sparse = [True] * num_layers
            self.prefix = "mlp"
            self.alpha, self.limit = float(c["swiglu_alpha"]), float(c["swiglu_limit"])
        elif self.mixtral:
            self.num_experts = int(c["num_local_experts"])
            self.top_k = int(c["num_experts_per_tok"])
            self.expert_size = intermediate_size
            self.norm_topk_prob = True
            self.shared_size = 0
            self.sparse = [True] * num_layers
            self.prefix = "block_sparse_moe"
            self.names = ("w1", "w3", "w2")  # gate, up, down
        else:
            self.num_experts = int(c["num_experts"])
            self.top_k = int(c["num_experts_per_tok"])
            self.expert_size = int(c["moe_intermediate_size"])
            self.norm_topk_prob = bool(c["norm_topk_prob"])
            self.shared_size = int(c["shared_expert_intermediate_size"]) if model_type == "qwen2_moe" else 0
            only = c["mlp_only_layers"] or []
            step = int(c["decoder_sparse_step"])
            # Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer: sparse unless in mlp_only_layers, on the
            # decoder_sparse_step grid.
            self.sparse = [i not in only and self.num_experts > 0 and (i + 1) % step == 0 for i in range(num_layers)]
            self.prefix = "mlp"
            self.names = ("gate_proj", "up_proj", "down_proj")
        if not 1 <= self.top_k <= self.num_experts:
            raise ValueError("config.json: num_experts_per_tok must be in [1, number of experts]")


def mlp_shapes(moe, layer, hidden, intermediate_size):
    """{name: shape} of layer `layer`'s MLP tensors as the checkpoint stores them."""
    p = f"model.layers.{layer}."
    if not moe.sparse[layer]:
        return {p + "mlp.gate_proj.weight": [intermediate_size, hidden], p + "mlp.up_proj.weight": [intermediate_size, hidden],
                p + "mlp.down_proj.weight": [hidden, intermediate_size]}
    if moe.gpt_oss:  # stacked as GptOssExperts holds them: [E, in, out], gate and up interleaved
        b, e, n = p + "mlp.", moe.num_experts, moe.expert_size
        return {b + "router.weight": [e, hidden], b + "router.bias": [e],
                b + "experts.gate_up_proj": [e, hidden, 2 * n], b + "experts.gate_up_proj_bias": [e, 2 * n],
                b + "experts.down_proj": [e, n, hidden], b + "experts.down_proj_bias": [e, hidden]}
    b, (g, u, d), n = p + moe.prefix + ".", moe.names, moe.expert_size
    shapes = {b + "gate.weight": [moe.num_experts, hidden]}
    for e in range(moe.num_experts):
        shapes.update({f"{b}experts.{e}.{g}.weight": [n, hidden], f"{b}experts.{e}.{u}.weight": [n, hidden],
                       f"{b}experts.{e}.{d}.weight": [hidden, n]})
    if moe.shared_size:
        s = moe.shared_size
        shapes.update({b + "shared_expert.gate_proj.weight": [s, hidden], b + "shared_expert.up_proj.weight": [s, hidden],
                       b + "shared_expert.down_proj.weight": [hidden, s], b + "shared_expert_gate.weight": [1, hidden]})
    return shapes


def _gated_mlp(w, prefix, names, x):
    g, u, d = names
    return F.linear(F.silu(F.linear(x, w[prefix + g + ".weight"])) * F.linear(x, w[prefix + u + ".weight"]),
                    w[prefix + d + ".weight"])


def route(moe, router_logits, dtype):
    """(weights [T, k] in `dtype`, experts [T, k]): softmax in f32, top-k, optional renormalisation."""
    probs = F.softmax(router_logits, dim=1, dtype=torch.float)
    weights, experts = torch.topk(probs, moe.top_k, dim=-1)
    if moe.norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights.to(dtype), experts


def sparse_block(moe, w, layer, x):
    """The MoE block of layer `layer` on x [T, hidden]."""
    b = f"model.layers.{layer}.{moe.prefix}."
    weights, experts = route(moe, F.linear(x, w[b + "gate.weight"]), x.dtype)
    out = torch.zeros_like(x)
    mask = F.one_hot(experts, num_classes=moe.num_experts).permute(2, 1, 0)  # [E, k, T]
    for e in range(moe.num_experts):
        slot, tok = torch.where(mask[e])
        if tok.numel() == 0:
            continue
        y = _gated_mlp(w, f"{b}experts.{e}.", moe.names, x[tok]) * weights[tok, slot, None]
        out.index_add_(0, tok, y.to(x.dtype))
    if moe.shared_size:
        shared = _gated_mlp(w, b + "shared_expert.", ("gate_proj", "up_proj", "down_proj"), x)
        out = out + torch.sigmoid(F.linear(x, w[b + "shared_expert_gate.weight"])) * shared
    return out


def gpt_oss_block(moe, w, layer, x):
    """GptOssMLP on x [T, hidden]: router logits = x W^T + b; the top-k logits, softmax over those
    k (in the compute dtype); each chosen expert e computes h = x @ gate_up_proj[e] + bias, gate =
    h[:, 0::2] clamped above at limit, up = h[:, 1::2] clamped to [-limit, limit], then
    ((up + 1) * gate * sigmoid(alpha * gate)) @ down_proj[e] + down bias, times its weight, added
    in increasing expert order."""
    b = f"model.layers.{layer}.mlp."
    top, experts = torch.topk(F.linear(x, w[b + "router.weight"], w[b + "router.bias"]), moe.top_k, dim=-1)
    weights = F.softmax(top, dim=1, dtype=top.dtype)
    out = torch.zeros_like(x)
    for e in range(moe.num_experts):
        tok, slot = torch.where(experts == e)
        if tok.numel() == 0:
            continue
        h = x[tok] @ w[b + "experts.gate_up_proj"][e] + w[b + "experts.gate_up_proj_bias"][e]
        gate = h[:, 0::2].clamp(max=moe.limit)
        up = h[:, 1::2].clamp(min=-moe.limit, max=moe.limit)
        y = ((up + 1) * (gate * torch.sigmoid(gate * moe.alpha))) @ w[b + "experts.down_proj"][e]
        y = y + w[b + "experts.down_proj_bias"][e]
        out.index_add_(0, tok, (y * weights[tok, slot, None]).to(x.dtype))
    return out


# MXFP4 as the released gpt-oss checkpoints store experts (Transformers' integrations/mxfp4.py,
# convert_moe_packed_tensors): a weight W [E, R, K] (R output rows, K = the contracted inputs, a
# multiple of 32) is `*_blocks` uint8 [E, R, K/32, 16] and `*_scales` uint8 [E, R, K/32]. Block g of
# row r holds inputs 32g..32g+31: byte i's low nibble is input 2i, its high nibble input 2i+1, each an
# index into FP4_VALUES (E2M1), times 2^(scale - 127). The parameter GptOssExperts uses is the
# transpose, [E, K, R] (gate_up_proj [E, H, 2I], down_proj [E, I, H]).
FP4_VALUES = [+0.0, +0.5, +1.0, +1.5, +2.0, +3.0, +4.0, +6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantize_mxfp4(blocks, scales):
    """convert_moe_packed_tensors in f32: blocks [E, R, G, 16], scales [E, R, G] -> [E, G*32, R]."""
    if blocks.dtype != torch.uint8 or scales.dtype != torch.uint8 or blocks.shape[:-1] != scales.shape:
        raise ValueError(f"mxfp4: blocks {list(blocks.shape)} / scales {list(scales.shape)} do not fit")
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    *prefix, g, b = blocks.shape
    lo, hi = (blocks & 0x0F).long(), (blocks >> 4).long()
    out = torch.empty(*prefix, g, 2 * b, dtype=torch.float32)
    out[..., 0::2] = lut[lo]
    out[..., 1::2] = lut[hi]
    out = torch.ldexp(out, (scales.to(torch.int32) - 127).unsqueeze(-1).float())
    return out.reshape(*prefix, g * 2 * b).transpose(1, 2).contiguous()


def quantize_mxfp4(w):
    """The inverse layout of dequantize_mxfp4 for a parameter w [E, K, R]: (blocks, scales) with a
    shared exponent per 32 inputs (the largest |value| of the block maps to at most 6) and each value
    rounded to the nearest E2M1 value (ties to the lower index). Any such blocks serve: loom and the
    reference both compute with exactly what dequantize_mxfp4 gives back."""
    rows = w.float().transpose(1, 2)  # [E, R, K]
    e, r, k = rows.shape
    if k % 32:
        raise ValueError(f"mxfp4: {k} inputs are not a multiple of 32")
    grouped = rows.reshape(e, r, k // 32, 32)
    amax = grouped.abs().amax(dim=-1).clamp(min=2.0 ** -120)
    exp = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scales = (exp + 127).to(torch.uint8)
    scaled = grouped / torch.ldexp(torch.ones_like(exp), exp.int()).unsqueeze(-1)
    lut = torch.tensor(FP4_VALUES, dtype=torch.float32)
    idx = (scaled.unsqueeze(-1) - lut).abs().argmin(dim=-1).to(torch.uint8)  # [E, R, G, 32]
    blocks = idx[..., 0::2] | (idx[..., 1::2] << 4)
    return blocks.contiguous(), scales.contiguous()


def router_logits(moe, w, layer, x):
    b = f"model.layers.{layer}.{moe.prefix}."
    if moe.gpt_oss:
        return F.linear(x.float(), w[b + "router.weight"].float(), w[b + "router.bias"].float())
    return F.linear(x.float(), w[b + "gate.weight"].float())


def min_router_gap(moe, w, layer, x):
    """Smallest gap, over x's tokens, between the k-th and (k+1)-th router logit of the layer: how far
    the expert choice is from a tie (inf when every expert is chosen)."""
    if moe.top_k >= moe.num_experts:
        return float("inf")
    top = torch.topk(router_logits(moe, w, layer, x), moe.top_k + 1, dim=-1).values
    return float((top[:, -2] - top[:, -1]).min())
