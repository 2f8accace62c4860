#!/usr/bin/python3
"""Writes a tiny random checkpoint in Hugging Face layout: config.json, model.safetensors,
generation_config.json.

Weights come from a seeded torch.Generator in float32 and are rounded to bf16 (f16) for
--dtype bf16 (f16), so the checkpoints of one spec hold the same values up to rounding.
They are scaled so activations stay O(1) and greedy decoding is not degenerate:
  embeddings ~ N(0, embed_std^2) (0.2: large enough to matter, small enough that a tied lm_head
  does not just repeat the current token); linear weights ~ N(0, 1/fan_in), so each projection
  keeps unit scale, with q/k weights times sqrt(qk_scale) (4: sharper attention, so position,
  RoPE scaling and windows visibly change the output; for Qwen3 the q/k RMSNorm weights carry
  that factor instead, since the norm cancels the projection's scale); biases ~ N(0, 0.1^2); RMSNorm weights
  ~ 1 + N(0, 0.1^2); lm_head ~ N(0, logit_scale^2 / hidden), so logits have std ~ logit_scale.

Example:
  /usr/bin/python3 tests/reference/make_checkpoint.py --arch llama --out /tmp/ck --dtype bf16 \
      --hidden 64 --layers 2 --heads 4 --kv-heads 1 --head-dim 32 --rope '{"rope_type":"linear","factor":2}'
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_moe  # noqa: E402
import safetensors_io  # noqa: E402

ARCHS = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
         "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM",
         "gpt2": "GPT2LMHeadModel", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
         "gemma3": "Gemma3ForConditionalGeneration", "smollm3": "SmolLM3ForCausalLM",
         "olmo2": "Olmo2ForCausalLM", "granite": "GraniteForCausalLM",
         "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM",
         "qwen3_moe": "Qwen3MoeForCausalLM", "gpt_oss": "GptOssForCausalLM"}
DTYPES = {"f32": (torch.float32, "float32"), "bf16": (torch.bfloat16, "bfloat16"),
          "f16": (torch.float16, "float16")}

# Every knob with its default; make_fixtures.py passes dicts with a subset of these keys.
DEFAULT_SPEC = dict(
    arch="llama", dtype="f32", seed=0,
    vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=None, head_dim=None,
    tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
    rope_theta=10000.0, rope=None, rope_format="rope_scaling", max_position_embeddings=256,
    sliding_window=None, use_sliding_window=False, max_window_layers=None, layer_types=None,
    rms_norm_eps=1e-6, embed_std=0.2, logit_scale=3.0, qk_scale=4.0,
    partial_rotary_factor=None, legacy_names=False,
    query_pre_attn_scalar=None, attn_logit_softcapping=None, final_logit_softcapping=None,  # gemma2, gemma3
    # gemma3 / gemma3_text: the sliding layers' RoPE base and the 4.x pattern (None: not written);
    # gemma3 (Gemma3ForConditionalGeneration) also: its weight layout, "legacy" (language_model.model.*,
    # as Transformers 4.50 saved it) or "v5" (model.language_model.*), plus small vision-tower tensors.
    rope_local_base_freq=None, sliding_window_pattern=None, mm_layout="legacy",
    no_rope_layers=None, no_rope_layer_interval=None,  # smollm3 (None: not written)
    granite=None,  # granite: its multipliers (embedding/attention/residual_multiplier, logits_scaling) as given
    moe=None,  # mixtral / qwen2_moe / qwen3_moe: their MoE config fields, written to config.json as given
    router_scale=4.0,  # MoE router weights times this: decisive expert choices, far from ties
    expert_scale=1.0,  # gpt_oss: expert gate_up weights times this (4: the SwiGLU clamp at 7 binds)
    mxfp4_experts=False,  # gpt_oss: experts stored as the released checkpoints do (*_blocks / *_scales)
)


def build_gpt2_config(s):
    """GPT2Config as saved by Transformers: its own field names (n_embd, n_layer, …)."""
    if s["num_key_value_heads"] not in (None, s["num_attention_heads"]) or s["head_dim"] is not None:
        raise ValueError("gpt2: no GQA and no explicit head_dim")
    cfg = {
        "architectures": [ARCHS["gpt2"]],
        "model_type": "gpt2",
        "vocab_size": s["vocab_size"],
        "n_embd": s["hidden_size"],
        "n_layer": s["num_hidden_layers"],
        "n_head": s["num_attention_heads"],
        "n_positions": s["max_position_embeddings"],
        "n_ctx": s["max_position_embeddings"],
        "n_inner": s["intermediate_size"],
        "activation_function": "gelu_new",
        "layer_norm_epsilon": s["rms_norm_eps"],
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02,
        "scale_attn_weights": True,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": DTYPES[s["dtype"]][1],
    }
    if not s["tie_word_embeddings"]:
        cfg["tie_word_embeddings"] = False
    return cfg


def gpt2_tensor_specs(cfg, legacy):
    """GPT-2's tensors: Conv1D weights [in, out]; `legacy` drops the "transformer." prefix and adds
    the attn.bias causal-mask buffers, as the original OpenAI conversion on the Hub has them."""
    h, inner, n = cfg["n_embd"], cfg["n_inner"], cfg["n_positions"]
    pre = "" if legacy else "transformer."
    out = [(pre + "wte.weight", [cfg["vocab_size"], h]), (pre + "wpe.weight", [n, h]),
           (pre + "ln_f.weight", [h]), (pre + "ln_f.bias", [h])]
    if not cfg.get("tie_word_embeddings", True):
        out.append(("lm_head.weight", [cfg["vocab_size"], h]))
    for i in range(cfg["n_layer"]):
        p = f"{pre}h.{i}."
        out += [(p + "ln_1.weight", [h]), (p + "ln_1.bias", [h]), (p + "ln_2.weight", [h]), (p + "ln_2.bias", [h])]
        for name, shape in (("attn.c_attn", [h, 3 * h]), ("attn.c_proj", [h, h]),
                            ("mlp.c_fc", [h, inner]), ("mlp.c_proj", [inner, h])):
            out += [(p + name + ".weight", shape), (p + name + ".bias", [shape[1]])]
        if legacy:
            out.append((p + "attn.bias", [1, 1, n, n]))
    return out


def init_gpt2_tensor(name, shape, gen, spec):
    """As init_tensor, for GPT-2's names; Conv1D weights have fan_in = shape[0]."""
    if name.endswith(".attn.bias"):  # the causal-mask buffer (not c_attn.bias)
        return torch.tril(torch.ones(shape, dtype=torch.float32))
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
        return 1.0 + 0.1 * x
    if name.endswith(".bias"):
        return 0.1 * x
    if name.endswith(("wte.weight", "wpe.weight")):
        return spec["embed_std"] * x
    if name == "lm_head.weight":
        return spec["logit_scale"] / math.sqrt(shape[1]) * x
    w = x / math.sqrt(shape[0])
    if name.endswith("c_attn.weight"):  # q and k columns sharper, as for the other architectures
        h = shape[0]
        w[:, :2 * h] *= math.sqrt(spec["qk_scale"])
    return w


def build_gemma2_fields(s, cfg):
    """Gemma2Config's own fields: hidden_activation instead of hidden_act, head_dim always written,
    query_pre_attn_scalar, the soft-caps (None is written as null: off), sliding_window and an
    optional explicit layer_types (absent: even layers slide)."""
    del cfg["hidden_act"]
    cfg["hidden_activation"] = "gelu_pytorch_tanh"
    cfg["head_dim"] = s["head_dim"] if s["head_dim"] is not None else s["hidden_size"] // s["num_attention_heads"]
    cfg["query_pre_attn_scalar"] = (s["query_pre_attn_scalar"] if s["query_pre_attn_scalar"] is not None
                                    else cfg["head_dim"])
    cfg["attn_logit_softcapping"] = s["attn_logit_softcapping"]
    cfg["final_logit_softcapping"] = s["final_logit_softcapping"]
    cfg["sliding_window"] = s["sliding_window"]
    if s["layer_types"] is not None:
        cfg["layer_types"] = s["layer_types"]
    cfg["pad_token_id"] = 0


def build_gemma3_fields(s, cfg):
    """Gemma3TextConfig's fields: Gemma2's, plus rope_local_base_freq and (4.x configs)
    sliding_window_pattern; with rope_format "rope_parameters", Transformers 5.x's per-layer-type
    rope_parameters ({"full_attention": {...}, "sliding_attention": {...}}) instead."""
    build_gemma2_fields(s, cfg)
    if s["sliding_window_pattern"] is not None:
        cfg["sliding_window_pattern"] = s["sliding_window_pattern"]
    local = s["rope_local_base_freq"] if s["rope_local_base_freq"] is not None else 10000.0
    if s["rope_format"] == "rope_parameters":
        full = {"rope_type": "default"}
        full.update(s["rope"] or {})
        full["rope_theta"] = s["rope_theta"]
        cfg["rope_parameters"] = {"full_attention": full,
                                  "sliding_attention": {"rope_type": "default", "rope_theta": local}}
    else:
        cfg["rope_theta"] = s["rope_theta"]
        cfg["rope_scaling"] = dict(s["rope"]) if s["rope"] else None
        cfg["rope_local_base_freq"] = local


def build_config(spec):
    """config.json contents as Transformers would save them for this architecture."""
    s = spec
    if s["arch"] == "gpt2":
        return build_gpt2_config(s)
    if s["arch"] == "gemma3":  # Gemma3Config: the text model's config under text_config
        text = build_config(dict(s, arch="gemma3_text"))
        top = {"architectures": [ARCHS["gemma3"]], "model_type": "gemma3",
               "torch_dtype": text.pop("torch_dtype"), "text_config": text,
               "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 16, "image_size": 32,
                                 "patch_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
                                 "intermediate_size": 32},
               "mm_tokens_per_image": 4, "boi_token_index": 255999, "eoi_token_index": 256000,
               "image_token_index": 262144}
        text.pop("architectures")
        return top
    heads = s["num_attention_heads"]
    kv = s["num_key_value_heads"] if s["num_key_value_heads"] is not None else heads
    cfg = {
        "architectures": [ARCHS[s["arch"]]],
        "model_type": s["arch"],
        "vocab_size": s["vocab_size"],
        "hidden_size": s["hidden_size"],
        "intermediate_size": s["intermediate_size"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "hidden_act": "silu",
        "max_position_embeddings": s["max_position_embeddings"],
        "rms_norm_eps": s["rms_norm_eps"],
        "tie_word_embeddings": s["tie_word_embeddings"],
        "initializer_range": 0.02,
        "attention_dropout": 0.0,
        "use_cache": True,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": DTYPES[s["dtype"]][1],
    }
    head_dim = s["head_dim"]
    if s["arch"] in ("qwen3", "qwen3_moe", "gpt_oss") and head_dim is None:
        head_dim = s["hidden_size"] // heads  # Qwen3 configs always carry head_dim (default 128)
    if head_dim is not None:
        cfg["head_dim"] = head_dim
    if s["arch"] == "gemma2":
        build_gemma2_fields(s, cfg)
    elif s["arch"] == "gemma3_text":
        build_gemma3_fields(s, cfg)
    elif any(s[k] is not None for k in ("query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping")):
        raise ValueError(f"{s['arch']}: query_pre_attn_scalar and the soft-caps are gemma2 knobs")
    if s["arch"] in ("llama", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "smollm3", "olmo2", "granite"):
        cfg["attention_bias"] = s["attention_bias"]
    elif s["arch"] == "gpt_oss":  # GptOssConfig: biases by default, and a window on its sliding layers
        cfg["attention_bias"] = True
        cfg["sliding_window"] = s["sliding_window"]
        if s["layer_types"] is not None:
            cfg["layer_types"] = s["layer_types"]
    elif s["arch"] == "phi3":  # Phi3Config writes it (and the model ignores a false one)
        cfg["attention_bias"] = False
        if s["attention_bias"]:
            raise ValueError("phi3: attention_bias is fixed by the architecture")
    elif s["attention_bias"]:
        raise ValueError(f"{s['arch']}: attention_bias is fixed by the architecture")
    if s["arch"] == "smollm3":  # SmolLM3Config: NoPE layers, and windows only on them
        cfg["use_sliding_window"] = s["use_sliding_window"]
        cfg["sliding_window"] = s["sliding_window"]
        for key in ("no_rope_layers", "no_rope_layer_interval", "layer_types"):
            if s[key] is not None:
                cfg[key] = s[key]
    if s["arch"] == "granite":
        cfg.update(s["granite"] or {})
    elif s["granite"]:
        raise ValueError("granite is a granite knob")
    if s["arch"] in ("llama", "granite"):
        cfg["mlp_bias"] = s["mlp_bias"]
    elif s["mlp_bias"]:
        raise ValueError(f"{s['arch']}: mlp_bias is only a llama knob")
    if s["arch"] in ("mistral", "phi3", "mixtral"):
        cfg["sliding_window"] = s["sliding_window"]
    if s["arch"] in ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss"):
        cfg.update(s["moe"] or {})
    elif s["moe"]:
        raise ValueError("moe is a mixtral / qwen2_moe / qwen3_moe knob")
    if s["arch"] == "phi3":
        # Phi-3 keeps the pre-extension length at the top level (longrope reads it from there).
        cfg["original_max_position_embeddings"] = (s["rope"] or {}).get("original_max_position_embeddings",
                                                                        s["max_position_embeddings"])
        cfg["resid_pdrop"] = 0.0
        cfg["embd_pdrop"] = 0.0
    if s["partial_rotary_factor"] is not None:
        if s["arch"] != "phi3":
            raise ValueError("partial_rotary_factor is only a phi3 knob")
        cfg["partial_rotary_factor"] = s["partial_rotary_factor"]
    if s["arch"] in ("qwen2", "qwen3", "qwen2_moe"):
        cfg["use_sliding_window"] = s["use_sliding_window"]
        cfg["sliding_window"] = s["sliding_window"]
        cfg["max_window_layers"] = (s["max_window_layers"] if s["max_window_layers"] is not None
                                    else s["num_hidden_layers"])
        if s["layer_types"] is not None:
            cfg["layer_types"] = s["layer_types"]
    elif s["arch"] == "qwen3_moe":  # Qwen3MoeConfig: a window for every layer, only with use_sliding_window
        cfg["use_sliding_window"] = s["use_sliding_window"]
        cfg["sliding_window"] = s["sliding_window"]
        if s["layer_types"] is not None or s["max_window_layers"] is not None:
            raise ValueError("qwen3_moe has no layer_types or max_window_layers")
    elif s["arch"] in ("llama",) and s["sliding_window"] is not None:
        raise ValueError("llama has no sliding window")
    if s["arch"] == "gemma3_text":
        return cfg  # RoPE written by build_gemma3_fields
    rope = dict(s["rope"]) if s["rope"] else None
    if rope and s["arch"] == "phi3":
        rope.pop("original_max_position_embeddings", None)
    if s["rope_format"] == "rope_parameters":  # Transformers 5.x layout
        params = {"rope_type": "default"}
        params.update(rope or {})
        params["rope_theta"] = s["rope_theta"]
        cfg["rope_parameters"] = params
    else:  # Transformers 4.x layout
        cfg["rope_theta"] = s["rope_theta"]
        cfg["rope_scaling"] = rope
    return cfg


def tensor_specs(cfg):
    """[(name, shape)] of every tensor the checkpoint stores."""
    arch = cfg["model_type"]
    if arch == "gemma3":
        return gemma3_mm_tensor_specs(cfg)
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv, inter = cfg["num_key_value_heads"], cfg["intermediate_size"]
    hd = cfg.get("head_dim") or h // heads
    qkv_bias = (arch == "qwen2" or (arch == "qwen2_moe" and cfg.get("qkv_bias", True))
                or (arch in ("llama", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gpt_oss", "smollm3", "olmo2",
                             "granite") and cfg.get("attention_bias")))
    o_bias = arch in ("llama", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gpt_oss", "smollm3", "olmo2",
                      "granite") and cfg.get("attention_bias")
    mlp_bias = arch in ("llama", "granite") and cfg.get("mlp_bias")
    moe = None
    if arch in ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss"):  # per-expert tensors, as the Hub's checkpoints
        defaults = {"mixtral": reference_moe.MIXTRAL_DEFAULTS, "qwen2_moe": reference_moe.QWEN2_MOE_DEFAULTS,
                    "qwen3_moe": reference_moe.QWEN3_MOE_DEFAULTS, "gpt_oss": reference_moe.GPT_OSS_DEFAULTS}[arch]
        moe = reference_moe.MoeConfig(arch, dict(defaults, **{k: v for k, v in cfg.items() if k in defaults}),
                                      cfg["num_hidden_layers"], inter)
    out = [("model.embed_tokens.weight", [cfg["vocab_size"], h]), ("model.norm.weight", [h])]
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", [cfg["vocab_size"], h]))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "post_attention_layernorm.weight", [h])]
        if arch != "olmo2":  # Olmo2 has no input norm, and a norm after the MLP instead
            out.append((p + "input_layernorm.weight", [h]))
        else:
            out.append((p + "post_feedforward_layernorm.weight", [h]))
        if arch in ("gemma2", "gemma3_text"):
            out += [(p + "pre_feedforward_layernorm.weight", [h]), (p + "post_feedforward_layernorm.weight", [h])]
        for name, rows in (("q_proj", heads * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            out.append((p + f"self_attn.{name}.weight", [rows, h]))
            if qkv_bias:
                out.append((p + f"self_attn.{name}.bias", [rows]))
        out.append((p + "self_attn.o_proj.weight", [h, heads * hd]))
        if o_bias:
            out.append((p + "self_attn.o_proj.bias", [h]))
        if arch in ("qwen3", "qwen3_moe", "gemma3_text"):
            out += [(p + "self_attn.q_norm.weight", [hd]), (p + "self_attn.k_norm.weight", [hd])]
        if arch == "olmo2":  # over the whole projections
            out += [(p + "self_attn.q_norm.weight", [heads * hd]), (p + "self_attn.k_norm.weight", [kv * hd])]
        if arch == "gpt_oss":
            out.append((p + "self_attn.sinks", [heads]))
        if moe:
            out += list(reference_moe.mlp_shapes(moe, i, h, inter).items())
            continue
        for name, shape in (("gate_proj", [inter, h]), ("up_proj", [inter, h]), ("down_proj", [h, inter])):
            out.append((p + f"mlp.{name}.weight", shape))
            if mlp_bias:
                out.append((p + f"mlp.{name}.bias", [shape[0]]))
    return out


def gemma3_mm_tensor_specs(cfg):
    """Gemma3ForConditionalGeneration's tensors: the text model's under language_model.model.*
    ("legacy") or model.language_model.* ("v5", lm_head at the top), plus a few vision-tower and
    projector tensors (random; no text forward reads them)."""
    text = tensor_specs(cfg["text_config"])
    layout = cfg.get("_mm_layout", "legacy")
    out = []
    for name, shape in text:
        if layout == "legacy":
            out.append(("language_model." + name, shape))
        else:
            out.append((("model.language_model." + name[len("model."):]) if name.startswith("model.") else name, shape))
    vis = cfg["vision_config"]["hidden_size"]
    pre = "" if layout == "legacy" else "model."
    out += [(pre + "vision_tower.vision_model.embeddings.patch_embedding.weight", [vis, 3, 8, 8]),
            (pre + "vision_tower.vision_model.post_layernorm.weight", [vis]),
            (pre + "multi_modal_projector.mm_input_projection_weight", [vis, cfg["text_config"]["hidden_size"]]),
            (pre + "multi_modal_projector.mm_soft_emb_norm.weight", [vis])]
    return out


def init_tensor(name, shape, gen, spec):
    """One tensor's random values (f32), scaled as described in the module docstring."""
    x = torch.randn(shape, generator=gen, dtype=torch.float32)
    if name.endswith(("q_norm.weight", "k_norm.weight")) and spec["arch"] in ("gemma3", "gemma3_text"):
        # Gemma3's q/k norms scale by (1 + w): the same effective scale as Qwen3's below.
        return math.sqrt(spec["qk_scale"]) * (1.0 + 0.1 * x) - 1.0
    if name.endswith(("q_norm.weight", "k_norm.weight")):
        # Qwen3's q/k RMSNorm undoes the q/k weight scale; its weight sets the sharpness instead.
        return math.sqrt(spec["qk_scale"]) * (1.0 + 0.1 * x)
    if name.endswith("norm.weight"):
        return 1.0 + 0.1 * x
    if name.endswith((".bias", "_bias")):
        return 0.1 * x
    if name.endswith(".sinks"):  # one logit per head, against scores of O(1)..O(qk_scale)
        return x
    if name.endswith("experts.gate_up_proj"):  # GptOssExperts [E, in, out]
        return spec["expert_scale"] / math.sqrt(shape[1]) * x
    if name.endswith("experts.down_proj"):
        return x / math.sqrt(shape[1])
    if name.endswith("embed_tokens.weight"):
        return spec["embed_std"] * x
    if name.endswith("lm_head.weight"):
        return spec["logit_scale"] / math.sqrt(shape[1]) * x
    scale = 1.0 / math.sqrt(shape[1])
    if name.endswith(("q_proj.weight", "k_proj.weight")):
        scale *= math.sqrt(spec["qk_scale"])  # sharper or flatter attention
    if name.endswith(("mlp.gate.weight", "block_sparse_moe.gate.weight", "mlp.router.weight")):
        scale *= spec["router_scale"]
    return scale * x


def fuse_phi3(cfg, tensors):
    """Phi3 stores q/k/v as one qkv_proj (rows q | k | v) and gate/up as one gate_up_proj
    (rows gate | up). The parts are drawn as for llama, then concatenated, so the scaling
    rules above hold for each part."""
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors[p + "self_attn.qkv_proj.weight"] = torch.cat(
            [tensors.pop(p + f"self_attn.{n}.weight") for n in ("q_proj", "k_proj", "v_proj")], dim=0)
        tensors[p + "mlp.gate_up_proj.weight"] = torch.cat(
            [tensors.pop(p + f"mlp.{n}.weight") for n in ("gate_proj", "up_proj")], dim=0)
    return tensors


def quantize_gpt_oss_experts(cfg, tensors):
    """gpt-oss as OpenAI ships it: every expert matrix as MXFP4 blocks and scales (reference_moe.py),
    biases, router and attention unquantized, and the config's quantization_config saying so."""
    for name in [n for n in tensors if n.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        blocks, scales = reference_moe.quantize_mxfp4(tensors.pop(name))
        tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    return tensors


def make_checkpoint(out_dir, **overrides):
    """Writes the checkpoint for DEFAULT_SPEC updated with `overrides`; returns the config dict."""
    unknown = set(overrides) - set(DEFAULT_SPEC)
    if unknown:
        raise ValueError(f"unknown checkpoint knobs: {sorted(unknown)}")
    spec = dict(DEFAULT_SPEC, **overrides)
    if spec["arch"] not in ARCHS:
        raise ValueError(f"unknown arch {spec['arch']!r}; choose from {sorted(ARCHS)}")
    if spec["dtype"] not in DTYPES:
        raise ValueError(f"unknown dtype {spec['dtype']!r}; choose from {sorted(DTYPES)}")
    cfg = build_config(spec)
    if spec["arch"] == "gemma3":
        cfg["_mm_layout"] = spec["mm_layout"]  # read by gemma3_mm_tensor_specs, not written
    os.makedirs(out_dir, exist_ok=True)
    gen = torch.Generator().manual_seed(int(spec["seed"]))
    dtype = DTYPES[spec["dtype"]][0]
    # Values are drawn in a fixed (sorted-name) order so a spec always gives the same weights.
    if spec["arch"] == "gpt2":
        # Drawn in the order of the prefixed names, so the legacy layout holds the same values.
        specs = sorted(gpt2_tensor_specs(cfg, spec["legacy_names"]),
                       key=lambda ns: ns[0] if ns[0].startswith(("transformer.", "lm_head")) else "transformer." + ns[0])
        tensors = {name: init_gpt2_tensor(name, shape, gen, spec).to(dtype) for name, shape in specs}
    else:
        if spec["legacy_names"]:
            raise ValueError("legacy_names is only a gpt2 knob")
        specs = sorted(tensor_specs(cfg))
        tensors = {name: init_tensor(name, shape, gen, spec).to(dtype) for name, shape in specs}
    if spec["arch"] == "phi3":
        tensors = fuse_phi3(cfg, tensors)
    if spec["mxfp4_experts"]:
        if spec["arch"] != "gpt_oss":
            raise ValueError("mxfp4_experts is a gpt_oss knob")
        tensors = quantize_gpt_oss_experts(cfg, tensors)
    cfg.pop("_mm_layout", None)
    safetensors_io.save_file(tensors, os.path.join(out_dir, "model.safetensors"), {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "do_sample": False}, f, indent=2)
        f.write("\n")
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--arch", choices=sorted(ARCHS), default="llama")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=DEFAULT_SPEC["vocab_size"])
    ap.add_argument("--hidden", type=int, default=DEFAULT_SPEC["hidden_size"])
    ap.add_argument("--intermediate", type=int, default=DEFAULT_SPEC["intermediate_size"])
    ap.add_argument("--layers", type=int, default=DEFAULT_SPEC["num_hidden_layers"])
    ap.add_argument("--heads", type=int, default=DEFAULT_SPEC["num_attention_heads"])
    ap.add_argument("--kv-heads", type=int, default=None)
    ap.add_argument("--head-dim", type=int, default=None)
    ap.add_argument("--tie", action="store_true", help="tie_word_embeddings")
    ap.add_argument("--attention-bias", action="store_true")
    ap.add_argument("--mlp-bias", action="store_true")
    ap.add_argument("--rope-theta", type=float, default=DEFAULT_SPEC["rope_theta"])
    ap.add_argument("--rope", default=None, help='rope scaling JSON, e.g. {"rope_type":"linear","factor":2}')
    ap.add_argument("--rope-format", choices=("rope_scaling", "rope_parameters"), default="rope_scaling")
    ap.add_argument("--max-pos", type=int, default=DEFAULT_SPEC["max_position_embeddings"])
    ap.add_argument("--sliding-window", type=int, default=None)
    ap.add_argument("--use-sliding-window", action="store_true", help="qwen2/qwen3")
    ap.add_argument("--max-window-layers", type=int, default=None, help="qwen2/qwen3")
    args = ap.parse_args(argv)
    cfg = make_checkpoint(
        args.out, arch=args.arch, dtype=args.dtype, seed=args.seed, vocab_size=args.vocab,
        hidden_size=args.hidden, intermediate_size=args.intermediate, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
        tie_word_embeddings=args.tie, attention_bias=args.attention_bias, mlp_bias=args.mlp_bias,
        rope_theta=args.rope_theta, rope=json.loads(args.rope) if args.rope else None,
        rope_format=args.rope_format, max_position_embeddings=args.max_pos, sliding_window=args.sliding_window,
        use_sliding_window=args.use_sliding_window, max_window_layers=args.max_window_layers)
    print(f"wrote {args.out} ({cfg['model_type']}, {args.dtype})")


if __name__ == "__main__":
    main()
