#!/usr/bin/python3
"""Independent PyTorch reference for decoder-only checkpoints in Hugging Face layout.

Covers LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and
Phi3ForCausalLM (fused qkv_proj / gate_up_proj, split on the activations as modeling_phi3.py does) and
GPT2LMHeadModel (Conv1D weights [in, out], fused c_attn, LayerNorm, learned positions, gelu_new) and
Gemma2ForCausalLM (scaled embeddings, (1 + w) RMSNorms around attention and MLP, GeGLU, attention and
final logit soft-capping, query_pre_attn_scalar, alternating sliding layers), Gemma3ForCausalLM and the
text model of Gemma3ForConditionalGeneration (Gemma2's layer plus (1 + w) q/k norms per head, a local
RoPE base on sliding layers and the global one, with its scaling, on full layers, a 5:1 sliding
pattern, no soft-caps by default), MixtralForCausalLM,
Qwen2MoeForCausalLM and Qwen3MoeForCausalLM (sparse MoE MLPs, see reference_moe.py) and
GptOssForCausalLM (attention sinks, biased MoE with a clamped SwiGLU, unquantized experts) with the
semantics of Transformers' modeling code (eager attention path), written from scratch so that
loom can be parity-checked without Transformers installed (Debian 12 ships only torch 1.13,
which has no scaled_dot_product_attention: attention is written out with an explicit mask).

Numerics: by default every weight is upcast to float32 and the whole model computes in float32
(also for bf16 checkpoints: the bf16 values are exact in f32, so this is "the checkpoint's
function evaluated in f32"). Passing dtype=torch.bfloat16 keeps bf16 weights and computes like
Transformers' eager bf16 path (RMSNorm statistics, RoPE tables and softmax in f32, everything
else in bf16); bench/torch_bench.py uses that.

Usage:
  /usr/bin/python3 tests/reference/reference_model.py --model DIR --prompt-ids 1,2,3 \
      [--greedy N] [--dtype f32|bf16] --out result.json
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference_moe  # noqa: E402
import safetensors_io  # noqa: E402

# Transformers' configuration defaults per model_type (configuration_<model>.py).
# None for num_key_value_heads / head_dim means "derive" (heads, hidden // heads).
_DEFAULTS = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
                  max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_theta=10000.0, attention_bias=False, mlp_bias=False),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                    max_position_embeddings=4096 * 32, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    rope_theta=10000.0, sliding_window=4096),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=None, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_theta=10000.0, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                  layer_types=None),
    "qwen3": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, head_dim=128, hidden_act="silu",
                  max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  rope_theta=10000.0, attention_bias=False, use_sliding_window=False, sliding_window=4096,
                  max_window_layers=28, layer_types=None),
    # configuration_phi3.py. sliding_window applies to every layer (Phi3Model builds one
    # sliding-window causal mask for the stack); partial_rotary_factor rotates the first dims.
    "phi3": dict(vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
                 max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False,
                 rope_theta=10000.0, attention_bias=False, sliding_window=None),
    # configuration_gpt2.py (its own field names; Config translates them).
    # configuration_gemma2.py: hidden_activation (not hidden_act), explicit head_dim, tied,
    # layer_types defaulting to sliding on even layers (0, 2, ...) and full on odd ones.
    "gemma2": dict(vocab_size=256000, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                   num_attention_heads=8, num_key_value_heads=4, head_dim=256, hidden_activation="gelu_pytorch_tanh",
                   max_position_embeddings=8192, rms_norm_eps=1e-6, tie_word_embeddings=True,
                   rope_theta=10000.0, attention_bias=False, query_pre_attn_scalar=256, sliding_window=4096,
                   layer_types=None, final_logit_softcapping=30.0, attn_logit_softcapping=50.0,
                   use_bidirectional_attention=None),
    # configuration_gemma3.py (Gemma3TextConfig): Gemma2's fields with no soft-caps by default, a
    # global rope_theta of 1e6 (with rope_scaling) and rope_local_base_freq for the sliding layers;
    # layer_types defaults from sliding_window_pattern (6: every sixth layer full).
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=131072, rms_norm_eps=1e-6,
                        tie_word_embeddings=True, rope_theta=1000000.0, attention_bias=False,
                        query_pre_attn_scalar=256, sliding_window=4096, layer_types=None,
                        final_logit_softcapping=None, attn_logit_softcapping=None,
                        use_bidirectional_attention=False, rope_local_base_freq=10000.0, sliding_window_pattern=6),
    # configuration_smollm3.py: Llama's layer; no_rope_layers (1 = RoPE, 0 = NoPE) defaults to a NoPE
    # layer every no_rope_layer_interval (4) layers; with use_sliding_window only NoPE layers slide;
    # tie_word_embeddings is PretrainedConfig's default (true).
    "smollm3": dict(vocab_size=128256, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                    num_attention_heads=16, num_key_value_heads=4, head_dim=None, hidden_act="silu",
                    max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=True,
                    rope_theta=2000000.0, attention_bias=False, mlp_bias=False, use_sliding_window=False,
                    sliding_window=None, no_rope_layers=None, no_rope_layer_interval=4, layer_types=None),
    # configuration_olmo2.py (OlmoConfig's fields): no input norm, norms after attention and MLP, q/k
    # norms over the whole projections, attention_bias on q/k/v/o.
    "olmo2": dict(vocab_size=50304, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
                  max_position_embeddings=2048, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  rope_theta=10000.0, attention_bias=False),
    # configuration_granite.py: Llama's fields plus the μP multipliers.
    "granite": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=None, head_dim=None, hidden_act="silu",
                    max_position_embeddings=2048, rms_norm_eps=1e-6, tie_word_embeddings=False,
                    rope_theta=10000.0, attention_bias=False, mlp_bias=False, embedding_multiplier=1.0,
                    logits_scaling=1.0, residual_multiplier=1.0, attention_multiplier=1.0),
    # configuration_mixtral.py: every layer sparse; sliding_window (None) on every layer, like Mistral.
    "mixtral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, head_dim=None, hidden_act="silu",
                    max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_theta=1e6, sliding_window=None, **reference_moe.MIXTRAL_DEFAULTS),
    # configuration_qwen2_moe.py: Qwen2's attention (q/k/v bias per qkv_bias) and windows.
    "qwen2_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=5632, num_hidden_layers=24,
                      num_attention_heads=16, num_key_value_heads=16, head_dim=None, hidden_act="silu",
                      max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_theta=10000.0, use_sliding_window=False, sliding_window=4096, max_window_layers=28,
                      layer_types=None, **reference_moe.QWEN2_MOE_DEFAULTS),
    # configuration_qwen3_moe.py: Qwen3's attention (q/k norms, attention_bias); head_dim is not a
    # field (getattr falls back to hidden // heads); sliding_window, kept only with
    # use_sliding_window, goes to every layer (no layer_types).
    "qwen3_moe": dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, num_hidden_layers=24,
                      num_attention_heads=32, num_key_value_heads=4, head_dim=None, hidden_act="silu",
                      max_position_embeddings=32768, rms_norm_eps=1e-6, tie_word_embeddings=False,
                      rope_theta=10000.0, attention_bias=False, use_sliding_window=False, sliding_window=4096,
                      **reference_moe.QWEN3_MOE_DEFAULTS),
    # configuration_gpt_oss.py: q/k/v/o biases (attention_bias), a learned sink logit per head, even
    # layers sliding (window 128), YaRN by default, every MLP a biased MoE (reference_moe.py).
    "gpt_oss": dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, num_hidden_layers=36,
                    num_attention_heads=64, num_key_value_heads=8, head_dim=64, hidden_act="silu",
                    max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False,
                    rope_theta=150000.0, attention_bias=True, sliding_window=128, layer_types=None,
                    **reference_moe.GPT_OSS_DEFAULTS),
    "gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                 activation_function="gelu_new", layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                 scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False),
}

ROPE_TYPES = ("default", "linear", "dynamic", "llama3", "yarn", "longrope")


class Config:
    """The resolved hyper-parameters the forward pass needs (no Transformers defaults left implicit)."""

    def __init__(self, raw):
        model_type = raw.get("model_type")
        # Gemma3ForConditionalGeneration: the language model's config is text_config (a
        # Gemma3TextConfig); the vision tower is not part of the text forward.
        self.conditional_generation = model_type == "gemma3"
        if self.conditional_generation:
            raw = dict(raw.get("text_config") or {}, model_type="gemma3_text")
            model_type = "gemma3_text"
        if model_type not in _DEFAULTS:
            raise ValueError(f"config.json: unsupported model_type {model_type!r}; supported: {sorted(_DEFAULTS)}")
        c = dict(_DEFAULTS[model_type])
        c.update({k: v for k, v in raw.items() if k in c or k in ("rope_scaling", "rope_parameters",
                                                                     "partial_rotary_factor",
                                                                     "original_max_position_embeddings")})
        self.model_type = model_type
        self.gpt2 = model_type == "gpt2"
        self.gemma3 = model_type == "gemma3_text"
        # Gemma2 and Gemma3 share the scaled embeddings, the (1 + w) norms, the four norms a layer,
        # GeGLU and query_pre_attn_scalar; `gemma2` below means either.
        self.gemma2 = model_type == "gemma2" or self.gemma3
        self.gpt_oss = model_type == "gpt_oss"  # attention sinks, GptOssRMSNorm, GptOssMLP
        # gpt-oss as released: experts stored as MXFP4 blocks and scales (quantization_config).
        self.mxfp4 = self.gpt_oss and (raw.get("quantization_config") or {}).get("quant_method") == "mxfp4"
        self.olmo2 = model_type == "olmo2"  # post-norms, q/k norms over the whole projections
        self.granite = model_type == "granite"  # embedding / attention / residual multipliers, logits scaling
        # Gemma2 only: attention scores and final logits become cap * tanh(x / cap) (None = off).
        self.attn_softcap = self.final_softcap = None
        self.moe = None  # Mixtral, Qwen2-MoE: which layers are sparse and how they route (set below)
        self.layer_use_rope = None  # SmolLM3: per layer, whether it rotates q and k (None: all do)
        if self.gpt2:
            self._init_gpt2(c)
            return
        self.vocab_size = int(c["vocab_size"])
        self.hidden_size = int(c["hidden_size"])
        self.intermediate_size = int(c["intermediate_size"])
        self.num_hidden_layers = int(c["num_hidden_layers"])
        self.num_attention_heads = int(c["num_attention_heads"])
        kv = c["num_key_value_heads"]
        self.num_key_value_heads = int(kv if kv is not None else self.num_attention_heads)
        hd = c.get("head_dim")
        self.head_dim = int(hd if hd is not None else self.hidden_size // self.num_attention_heads)
        self.rms_norm_eps = float(c["rms_norm_eps"])
        self.max_position_embeddings = int(c["max_position_embeddings"])
        self.tie_word_embeddings = bool(c["tie_word_embeddings"])
        if self.gemma2:
            if c["hidden_activation"] != "gelu_pytorch_tanh":
                raise ValueError(f"config.json: hidden_activation {c['hidden_activation']!r} not supported")
            if c["use_bidirectional_attention"]:
                raise ValueError("config.json: use_bidirectional_attention is not supported")
            self.attn_scale = float(c["query_pre_attn_scalar"]) ** -0.5
            # Gemma3Attention keeps attn_logit_softcapping but never hands it to the attention
            # function, and Gemma3ForConditionalGeneration's head never applies
            # final_logit_softcapping (Gemma3ForCausalLM's does).
            self.attn_softcap = None if self.gemma3 else c["attn_logit_softcapping"]
            self.final_softcap = None if self.conditional_generation else c["final_logit_softcapping"]
        elif self.granite:
            self.attn_scale = float(c["attention_multiplier"])
            self.embedding_multiplier = float(c["embedding_multiplier"])
            self.residual_multiplier = float(c["residual_multiplier"])
            self.logits_scaling = float(c["logits_scaling"])
        if not self.gemma2 and c["hidden_act"] != "silu":
            raise ValueError(f"config.json: hidden_act {c['hidden_act']!r} not supported (only silu)")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("config.json: num_attention_heads must be a multiple of num_key_value_heads")

        # Which projections carry a bias, per architecture.
        if model_type == "qwen2":  # q/k/v always biased, o_proj never (modeling_qwen2.py)
            self.qkv_bias, self.o_bias, self.mlp_bias = True, False, False
        elif model_type in ("mistral", "mixtral"):
            self.qkv_bias, self.o_bias, self.mlp_bias = False, False, False
        elif model_type == "qwen2_moe":
            self.qkv_bias, self.o_bias, self.mlp_bias = bool(c["qkv_bias"]), False, False
        elif model_type in ("qwen3", "qwen3_moe", "gemma2", "gemma3_text", "gpt_oss", "olmo2"):
            ab = bool(c["attention_bias"])
            self.qkv_bias, self.o_bias, self.mlp_bias = ab, ab, False
        elif model_type == "phi3":  # nn.Linear(..., bias=False) everywhere in modeling_phi3.py
            if c["attention_bias"]:
                raise ValueError("config.json: Phi3 has no attention biases")
            self.qkv_bias, self.o_bias, self.mlp_bias = False, False, False
        else:  # llama, smollm3 (LlamaAttention, LlamaMLP)
            ab = bool(c["attention_bias"])
            self.qkv_bias, self.o_bias, self.mlp_bias = ab, ab, bool(c["mlp_bias"])
        self.qk_norm = model_type in ("qwen3", "qwen3_moe", "gemma3_text", "olmo2")  # Gemma3: (1 + w) norms
        self.fused = model_type == "phi3"  # qkv_proj and gate_up_proj stored (and applied) fused
        if model_type in ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss"):
            self.moe = reference_moe.MoeConfig(model_type, c, self.num_hidden_layers, self.intermediate_size)

        # Per-layer sliding window (None = full causal attention).
        if model_type in ("mistral", "phi3", "mixtral"):
            sw = c["sliding_window"]
            self.layer_windows = [int(sw) if sw is not None else None] * self.num_hidden_layers
        elif model_type == "qwen3_moe":
            sw = c["sliding_window"] if c["use_sliding_window"] else None
            self.layer_windows = [int(sw) if sw is not None else None] * self.num_hidden_layers
        elif model_type in ("qwen2", "qwen3", "qwen2_moe"):
            sw = c["sliding_window"] if c["use_sliding_window"] else None
            types = c["layer_types"]
            if types is None:
                types = ["sliding_attention" if sw is not None and i >= c["max_window_layers"] else "full_attention"
                         for i in range(self.num_hidden_layers)]
            if len(types) != self.num_hidden_layers:
                raise ValueError("config.json: layer_types must have num_hidden_layers entries")
            self.layer_windows = [int(sw) if t == "sliding_attention" and sw is not None else None for t in types]
        elif model_type == "smollm3":
            sw, types = c["sliding_window"] if c["use_sliding_window"] else None, c["layer_types"]
            nope = c["no_rope_layers"]
            if nope is None:
                nope = [int((i + 1) % int(c["no_rope_layer_interval"]) != 0) for i in range(self.num_hidden_layers)]
            if len(nope) < self.num_hidden_layers:
                raise ValueError("config.json: no_rope_layers must have an entry per layer")
            self.layer_use_rope = [bool(x) for x in nope[:self.num_hidden_layers]]
            if types is None:
                types = ["sliding_attention" if sw is not None and not r else "full_attention"
                         for r in self.layer_use_rope]
            self.layer_windows = [int(sw) if t == "sliding_attention" and sw is not None else None for t in types]
        elif self.gemma2 or self.gpt_oss:  # layer i slides iff i is even (Gemma3: iff (i + 1) % pattern), unless layer_types says
            sw, types = c["sliding_window"], c["layer_types"]
            pattern = int(c["sliding_window_pattern"]) if self.gemma3 else 2
            if types is None:
                types = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(self.num_hidden_layers)]
            if len(types) != self.num_hidden_layers:
                raise ValueError("config.json: layer_types must have num_hidden_layers entries")
            self.layer_windows = [int(sw) if t == "sliding_attention" and sw is not None else None for t in types]
        else:
            self.layer_windows = [None] * self.num_hidden_layers

        # RoPE: Transformers 4.x writes {"rope_theta": x, "rope_scaling": {...}}; 5.x writes
        # {"rope_parameters": {"rope_type", "rope_theta", ...}}. Both are accepted.
        rope = dict(c.get("rope_parameters") or c.get("rope_scaling") or {})
        local_rope = None
        if self.gemma3:
            # Gemma3TextModel's rotary_emb_local: the config with rope_theta = rope_local_base_freq and
            # rope_scaling default. Transformers 5.x writes both as rope_parameters per layer type.
            local_rope = {"rope_type": "default", "rope_theta": float(c["rope_local_base_freq"])}
            if rope and all(isinstance(v, dict) for v in rope.values()):
                local_rope = dict(rope.get("sliding_attention") or local_rope)
                rope = dict(rope.get("full_attention") or {})
                if local_rope.get("rope_type", local_rope.get("type", "default")) != "default":
                    raise ValueError("config.json: only default RoPE is supported on Gemma3's sliding layers")
                local_rope = {"rope_type": "default", "rope_theta": float(local_rope["rope_theta"])}
        if self.gpt_oss and not rope.get("rope_type", rope.get("type")):  # GptOssConfig's default: YaRN
            rope.update(rope_type="yarn", factor=32.0, beta_fast=32.0, beta_slow=1.0, truncate=False,
                        original_max_position_embeddings=4096)
        if rope and all(isinstance(v, dict) for v in rope.values()):
            raise ValueError("config.json: per-layer-type rope_parameters are not supported")
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ROPE_TYPES:
            raise ValueError(f"config.json: rope type {rope_type!r} not supported; supported: {ROPE_TYPES}")
        rope["rope_type"] = rope_type
        rope.setdefault("rope_theta", float(c["rope_theta"]))
        rope.setdefault("partial_rotary_factor", float(c.get("partial_rotary_factor", 1.0)))
        if rope_type in ("llama3", "yarn"):
            rope.setdefault("original_max_position_embeddings", self.max_position_embeddings)
        if rope_type == "longrope":  # Transformers' standardize_rope_params: a top-level value moves in
            rope.setdefault("original_max_position_embeddings",
                            c.get("original_max_position_embeddings") or self.max_position_embeddings)
        self.rope = rope
        # Which RoPE each layer uses: "global" (self.rope) everywhere but Gemma3's sliding layers.
        self.local_rope = None
        self.layer_rope = ["global"] * self.num_hidden_layers
        if local_rope is not None:
            self.local_rope = dict(local_rope, partial_rotary_factor=1.0)
            self.layer_rope = ["local" if w is not None else "global" for w in self.layer_windows]

    def rope_of(self, kind):
        return self.local_rope if kind == "local" else self.rope

    def _init_gpt2(self, c):
        """GPT2Config: n_embd/n_layer/n_head/n_positions/n_inner; no RoPE, no GQA, no windows."""
        self.vocab_size, self.hidden_size = int(c["vocab_size"]), int(c["n_embd"])
        self.num_hidden_layers, self.num_attention_heads = int(c["n_layer"]), int(c["n_head"])
        self.num_key_value_heads = self.num_attention_heads
        self.head_dim = self.hidden_size // self.num_attention_heads
        self.intermediate_size = int(c["n_inner"]) if c["n_inner"] is not None else 4 * self.hidden_size
        self.max_position_embeddings = int(c["n_positions"])
        self.rms_norm_eps = float(c["layer_norm_epsilon"])  # LayerNorm's eps here
        self.tie_word_embeddings = bool(c["tie_word_embeddings"])
        if c["activation_function"] not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"config.json: activation_function {c['activation_function']!r} not supported")
        if c["scale_attn_by_inverse_layer_idx"]:
            raise ValueError("config.json: scale_attn_by_inverse_layer_idx is not supported")
        self.attn_scale = self.head_dim ** -0.5 if c["scale_attn_weights"] else 1.0
        self.qkv_bias = self.o_bias = self.mlp_bias = True
        self.qk_norm = self.fused = False
        self.layer_windows = [None] * self.num_hidden_layers
        self.rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}
        self.local_rope = None
        self.layer_rope = ["global"] * self.num_hidden_layers

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.rope["partial_rotary_factor"])


# ----------------------------------------------------------------------------------------------
# RoPE (modeling_rope_utils.py). Every function returns (inv_freq [rotary_dim/2] f32,
# attention_scaling), the factor cos/sin are multiplied by.


def _default_inv_freq(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rope_parameters(cfg, seq_len=None, rope=None):
    """inv_freq and attention scaling for a sequence of `seq_len` positions, for cfg.rope (or
    `rope`, e.g. Gemma3's local one).

    seq_len only matters for "dynamic": Transformers recomputes inv_freq from the current
    length whenever it exceeds max_position_embeddings (dynamic_rope_update).
    """
    r = rope if rope is not None else cfg.rope
    rope_type, base = r["rope_type"], float(r["rope_theta"])
    dim = int(cfg.head_dim * r["partial_rotary_factor"])
    if rope_type == "default":
        return _default_inv_freq(base, dim), 1.0
    if rope_type == "linear":
        return _default_inv_freq(base, dim) / r["factor"], 1.0
    if rope_type == "dynamic":
        max_pos, factor = cfg.max_position_embeddings, r["factor"]
        if seq_len is None or seq_len <= max_pos:
            return _default_inv_freq(base, dim), 1.0
        # Transformers passes seq_len as an int64 tensor, so the base is computed in f32.
        s = torch.tensor(seq_len, dtype=torch.int64)
        base_t = base * ((factor * s / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        return 1.0 / (base_t ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)), 1.0
    if rope_type == "llama3":
        inv_freq = _default_inv_freq(base, dim)
        factor, low, high = r["factor"], r["low_freq_factor"], r["high_freq_factor"]
        old_ctx = r["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(is_medium, smoothed, scaled), 1.0
    if rope_type == "yarn":
        # Transformers 5.x semantics: `factor` is used as given; when it is missing it is the
        # ratio max_position_embeddings / original_max_position_embeddings. (4.x instead always
        # replaced it by that ratio when original_max_position_embeddings was present; configs
        # where the two agree behave the same under both.)
        orig = r["original_max_position_embeddings"]
        factor = r.get("factor")
        if factor is None:
            factor = cfg.max_position_embeddings / orig

        def get_mscale(scale, mscale=1.0):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        attention_factor = r.get("attention_factor")
        if attention_factor is None:
            mscale, mscale_all_dim = r.get("mscale"), r.get("mscale_all_dim")
            if mscale and mscale_all_dim:
                attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
            else:
                attention_factor = get_mscale(factor)
        beta_fast = r.get("beta_fast") or 32
        beta_slow = r.get("beta_slow") or 1

        def correction_dim(num_rotations):
            return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

        lo, hi = correction_dim(beta_fast), correction_dim(beta_slow)
        if r.get("truncate", True):
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, dim - 1)
        if lo == hi:
            hi += 0.001  # avoids a division by zero in the ramp
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - lo) / (hi - lo), 0, 1)
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
        extrapolation_factor = 1 - ramp
        inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor
        return inv_freq, attention_factor
    if rope_type == "longrope":
        # _compute_longrope_parameters (Transformers 5.x): factor defaults to max / original max
        # positions; the long factors apply once seq_len passes the original length.
        orig = r["original_max_position_embeddings"]
        factor = r.get("factor")
        if factor is None:
            factor = cfg.max_position_embeddings / orig
        attention_factor = r.get("attention_factor")
        if attention_factor is None:
            attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = r["long_factor"] if seq_len and seq_len > orig else r["short_factor"]
        ext_factors = torch.tensor(ext, dtype=torch.float32)
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        return 1.0 / (ext_factors * base ** shape), attention_factor
    raise AssertionError(rope_type)


def rope_cos_sin(inv_freq, attention_scaling, positions, dtype):
    """cos/sin tables [len(positions), rotary_dim], computed in f32 then cast (as Transformers)."""
    freqs = torch.outer(positions.float(), inv_freq.float())
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * attention_scaling).to(dtype), (emb.sin() * attention_scaling).to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x, cos, sin):
    """x [heads, T, head_dim]; rotates the first cos.shape[-1] dims (all, unless partial_rotary_factor
    < 1, where the rest pass through as in GPT-NeoX / Phi / Qwen-style partial rotary)."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    out = x_rot * cos + rotate_half(x_rot) * sin
    return torch.cat((out, x_pass), dim=-1) if x_pass.shape[-1] else out


class RotaryState:
    """RoPE with Transformers' state: for "dynamic", inv_freq is recomputed when a call sees a
    longer sequence than any before (growth), and restored when it sees one shorter than
    max_position_embeddings after having grown (reset). Only the cached decode path needs this;
    the no-cache forward computes inv_freq for its own length directly."""

    def __init__(self, cfg, rope=None):
        self.cfg = cfg
        self.r = rope if rope is not None else cfg.rope
        self.inv_freq, self.scaling = rope_parameters(cfg, rope=self.r)
        self.original_inv_freq = self.inv_freq
        self.max_seq_len_cached = cfg.max_position_embeddings

    def cos_sin(self, positions, dtype):
        if self.r["rope_type"] == "dynamic":
            seq_len = int(positions.max()) + 1
            if seq_len > self.max_seq_len_cached:
                self.inv_freq, self.scaling = rope_parameters(self.cfg, seq_len, rope=self.r)
                self.max_seq_len_cached = seq_len
            orig = self.cfg.max_position_embeddings
            if seq_len < orig and self.max_seq_len_cached > orig:
                self.inv_freq, self.max_seq_len_cached = self.original_inv_freq, orig
        elif self.r["rope_type"] == "longrope":  # _longrope_frequency_update
            orig = self.r["original_max_position_embeddings"]
            if int(positions.max()) + 1 > orig:
                self.inv_freq, _ = rope_parameters(self.cfg, orig + 1, rope=self.r)
            else:
                self.inv_freq = self.original_inv_freq
        return rope_cos_sin(self.inv_freq, self.scaling, positions, dtype)


# ----------------------------------------------------------------------------------------------
# Building blocks


def rms_norm(x, weight, eps):
    """Transformers' LlamaRMSNorm: statistics in f32, cast back, then scale by the weight."""
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


def gemma_rms_norm(x, weight, eps):
    """Gemma2RMSNorm: normalizes and scales by (1 + weight) in f32, then casts back."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (h * (1.0 + weight.float())).to(x.dtype)


def gpt_oss_rms_norm(x, weight, eps):
    """GptOssRMSNorm: normalizes and scales by the weight in f32, then casts back (Llama casts
    before scaling)."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return (weight * h).to(x.dtype)


def softcap(x, cap):
    """Gemma2's soft-capping: cap * tanh(x / cap); cap None leaves x unchanged."""
    return x if cap is None else torch.tanh(x / cap) * cap


def causal_mask(q_positions, kv_positions, window, dtype):
    """Additive mask [Tq, Tk]: 0 where query i may attend key j, the dtype's minimum elsewhere.

    Transformers' masking_utils: causal is kv <= q; the sliding-window overlay keeps
    kv > q - window, so a query sees itself and the window - 1 keys before it.
    """
    q = q_positions[:, None]
    k = kv_positions[None, :]
    allowed = k <= q
    if window is not None:
        allowed = allowed & (k > q - window)
    mask = torch.zeros(allowed.shape, dtype=dtype)
    return mask.masked_fill(~allowed, torch.finfo(dtype).min)


def repeat_kv(x, n_rep):
    """[kv_heads, T, D] -> [kv_heads * n_rep, T, D], each kv head serving n_rep query heads."""
    if n_rep == 1:
        return x
    kv, t, d = x.shape
    return x[:, None].expand(kv, n_rep, t, d).reshape(kv * n_rep, t, d)


def linear(x, w, b):
    return F.linear(x, w, b)


def conv1d(x, w, b):
    """GPT-2's Conv1D: weight stored [in, out], y = x @ w + b."""
    return torch.addmm(b, x, w)


def gelu_new(x):
    """NewGELUActivation: the tanh approximation, written out as activations.py does."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Model:
    """Weights + forward. `dtype` is the compute dtype (float32 by default, see module docstring)."""

    def __init__(self, model_dir, dtype=torch.float32):
        self.dir = model_dir
        with open(os.path.join(model_dir, "config.json")) as f:
            self.raw_config = json.load(f)
        self.cfg = Config(self.raw_config)
        self.dtype = dtype
        self.w = self._load_weights()
        # Smallest k-th vs (k+1)-th router logit gap seen by any sparse layer (MoE only): how close
        # the expert choice came to a tie, for the fixture checks.
        self.min_router_gap = float("inf")

    # -- weights ---------------------------------------------------------------------------
    def _gpt2_shapes(self):
        c = self.cfg
        h, inner = c.hidden_size, c.intermediate_size
        shapes = {"transformer.wte.weight": [c.vocab_size, h], "transformer.wpe.weight": [c.max_position_embeddings, h],
                  "transformer.ln_f.weight": [h], "transformer.ln_f.bias": [h]}
        if not c.tie_word_embeddings:
            shapes["lm_head.weight"] = [c.vocab_size, h]
        for i in range(c.num_hidden_layers):
            p = f"transformer.h.{i}."
            for n in ("ln_1", "ln_2"):
                shapes[p + n + ".weight"], shapes[p + n + ".bias"] = [h], [h]
            for n, (fan_in, fan_out) in (("attn.c_attn", (h, 3 * h)), ("attn.c_proj", (h, h)),
                                         ("mlp.c_fc", (h, inner)), ("mlp.c_proj", (inner, h))):
                shapes[p + n + ".weight"], shapes[p + n + ".bias"] = [fan_in, fan_out], [fan_out]
        return shapes

    def expected_shapes(self):
        c = self.cfg
        if c.gpt2:
            return self._gpt2_shapes()
        h, hd, nh, nkv = c.hidden_size, c.head_dim, c.num_attention_heads, c.num_key_value_heads
        shapes = {"model.embed_tokens.weight": [c.vocab_size, h], "model.norm.weight": [h]}
        if not c.tie_word_embeddings:
            shapes["lm_head.weight"] = [c.vocab_size, h]
        for i in range(c.num_hidden_layers):
            p = f"model.layers.{i}."
            shapes[p + "input_layernorm.weight"] = [h]
            shapes[p + "post_attention_layernorm.weight"] = [h]
            if c.gemma2:
                shapes[p + "pre_feedforward_layernorm.weight"] = [h]
                shapes[p + "post_feedforward_layernorm.weight"] = [h]
            if c.olmo2:  # Olmo2DecoderLayer deletes input_layernorm and adds a post-MLP norm
                del shapes[p + "input_layernorm.weight"]
                shapes[p + "post_feedforward_layernorm.weight"] = [h]
            if c.fused:
                shapes[p + "self_attn.qkv_proj.weight"] = [(nh + 2 * nkv) * hd, h]
                shapes[p + "self_attn.o_proj.weight"] = [h, nh * hd]
                shapes[p + "mlp.gate_up_proj.weight"] = [2 * c.intermediate_size, h]
                shapes[p + "mlp.down_proj.weight"] = [h, c.intermediate_size]
                continue
            for name, out in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
                shapes[p + f"self_attn.{name}.weight"] = [out, h]
                if c.qkv_bias:
                    shapes[p + f"self_attn.{name}.bias"] = [out]
            shapes[p + "self_attn.o_proj.weight"] = [h, nh * hd]
            if c.o_bias:
                shapes[p + "self_attn.o_proj.bias"] = [h]
            if c.gpt_oss:
                shapes[p + "self_attn.sinks"] = [nh]
            if c.qk_norm:
                shapes[p + "self_attn.q_norm.weight"] = [nh * hd if c.olmo2 else hd]
                shapes[p + "self_attn.k_norm.weight"] = [nkv * hd if c.olmo2 else hd]
            if c.moe:
                shapes.update(reference_moe.mlp_shapes(c.moe, i, h, c.intermediate_size))
                continue
            for name, shape in (("gate_proj", [c.intermediate_size, h]), ("up_proj", [c.intermediate_size, h]),
                                ("down_proj", [h, c.intermediate_size])):
                shapes[p + f"mlp.{name}.weight"] = shape
                if c.mlp_bias:
                    shapes[p + f"mlp.{name}.bias"] = [shape[0]]
        return shapes

    def _checkpoint_files(self):
        index = os.path.join(self.dir, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                return sorted({os.path.join(self.dir, v) for v in json.load(f)["weight_map"].values()})
        single = os.path.join(self.dir, "model.safetensors")
        if not os.path.exists(single):
            raise FileNotFoundError(f"{self.dir}: no model.safetensors or model.safetensors.index.json")
        return [single]

    def _load_weights(self):
        expected = self.expected_shapes()
        # The original OpenAI GPT-2 conversion stores h.N.* / wte / wpe / ln_f without "transformer.".
        legacy = {k[len("transformer."):]: k for k in expected if k.startswith("transformer.")} if self.cfg.gpt2 else {}
        if self.cfg.conditional_generation:
            # Gemma3ForConditionalGeneration's language model: language_model.model.* and
            # language_model.lm_head (as saved by Transformers 4.50) or model.language_model.* and
            # lm_head (_checkpoint_conversion_mapping's targets); vision_tower.* and
            # multi_modal_projector.* are not read.
            legacy = {}
            for k in expected:
                if k.startswith("model."):
                    legacy["language_model." + k] = k
                    legacy["model.language_model." + k[len("model."):]] = k
                else:
                    legacy["language_model." + k] = k
            expected_names = set(legacy) | {k for k in expected if not k.startswith("model.")}
            w = {}
            for path in self._checkpoint_files():
                for name, t in safetensors_io.load_file(path, names=expected_names).items():
                    name = legacy.get(name, name)
                    if list(t.shape) != expected[name]:
                        raise ValueError(f"{path}: tensor {name} has shape {list(t.shape)}, expected {expected[name]}")
                    w[name] = t.to(self.dtype)
            missing = sorted(set(expected) - set(w))
            if missing:
                raise ValueError(f"{self.dir}: missing tensors {missing[:5]}")
            if self.cfg.tie_word_embeddings:
                w["lm_head.weight"] = w["model.embed_tokens.weight"]
            return w
        # gpt-oss with quantization_config mxfp4: each expert matrix is stored as *_blocks and
        # *_scales, dequantized as Transformers' convert_moe_packed_tensors does (reference_moe.py).
        packed = {n + suffix: n for n in expected if self.cfg.mxfp4 and n.endswith(("experts.gate_up_proj",
                                                                                      "experts.down_proj"))
                  for suffix in ("_blocks", "_scales")}
        w, parts = {}, {}
        for path in self._checkpoint_files():
            for name, t in safetensors_io.load_file(path, names=set(expected) | set(legacy) | set(packed)).items():
                if name in packed:
                    parts[name] = t
                    continue
                name = legacy.get(name, name)
                if list(t.shape) != expected[name]:
                    raise ValueError(f"{path}: tensor {name} has shape {list(t.shape)}, expected {expected[name]}")
                w[name] = t.to(self.dtype)
        for name in sorted(set(packed.values())):
            if name + "_blocks" in parts and name + "_scales" in parts:
                t = reference_moe.dequantize_mxfp4(parts[name + "_blocks"], parts[name + "_scales"])
                if list(t.shape) != expected[name]:
                    raise ValueError(f"{name}_blocks/_scales dequantize to {list(t.shape)}, expected {expected[name]}")
                w[name] = t.to(self.dtype)
        missing = sorted(set(expected) - set(w))
        if missing:
            raise ValueError(f"{self.dir}: missing tensors {missing[:5]}{'...' if len(missing) > 5 else ''}")
        if self.cfg.tie_word_embeddings:
            w["lm_head.weight"] = w["transformer.wte.weight" if self.cfg.gpt2 else "model.embed_tokens.weight"]
        return w

    def _b(self, name):
        return self.w.get(name)

    # -- layers ----------------------------------------------------------------------------
    def _qkv(self, i, x, cos, sin):
        """Projects x [T, hidden] to q [H, T, D] and k, v [KV, T, D], with q/k norm and RoPE."""
        c, p = self.cfg, f"model.layers.{i}.self_attn."
        t = x.shape[0]
        if c.gpt2:  # GPT2Attention: c_attn output split into q | k | v, no rotary embedding
            p = f"transformer.h.{i}.attn."
            q, k, v = conv1d(x, self.w[p + "c_attn.weight"], self.w[p + "c_attn.bias"]).split(c.hidden_size, dim=-1)
            return tuple(y.reshape(t, -1, c.head_dim).transpose(0, 1) for y in (q, k, v))
        if c.fused:  # Phi3Attention: one projection, sliced into q | k | v
            qkv = linear(x, self.w[p + "qkv_proj.weight"], None)
            nq, nkv = c.num_attention_heads * c.head_dim, c.num_key_value_heads * c.head_dim
            q = qkv[:, :nq].reshape(t, -1, c.head_dim)
            k = qkv[:, nq:nq + nkv].reshape(t, -1, c.head_dim)
            v = qkv[:, nq + nkv:].reshape(t, -1, c.head_dim)
        elif c.olmo2:  # Olmo2Attention: q_norm / k_norm over the whole projections, then the heads
            q = linear(x, self.w[p + "q_proj.weight"], self._b(p + "q_proj.bias"))
            k = linear(x, self.w[p + "k_proj.weight"], self._b(p + "k_proj.bias"))
            if c.qk_norm:  # (switched off only by the fixtures' ablation)
                q = rms_norm(q, self.w[p + "q_norm.weight"], c.rms_norm_eps)
                k = rms_norm(k, self.w[p + "k_norm.weight"], c.rms_norm_eps)
            q, k = q.view(t, -1, c.head_dim), k.view(t, -1, c.head_dim)
            v = linear(x, self.w[p + "v_proj.weight"], self._b(p + "v_proj.bias")).view(t, -1, c.head_dim)
        else:
            q = linear(x, self.w[p + "q_proj.weight"], self._b(p + "q_proj.bias")).view(t, -1, c.head_dim)
            k = linear(x, self.w[p + "k_proj.weight"], self._b(p + "k_proj.bias")).view(t, -1, c.head_dim)
            v = linear(x, self.w[p + "v_proj.weight"], self._b(p + "v_proj.bias")).view(t, -1, c.head_dim)
        if c.qk_norm and not c.olmo2:  # Qwen3, Gemma3 ((1 + w)): RMSNorm over head_dim of each head, before RoPE
            norm = gemma_rms_norm if c.gemma3 else rms_norm
            q = norm(q, self.w[p + "q_norm.weight"], c.rms_norm_eps)
            k = norm(k, self.w[p + "k_norm.weight"], c.rms_norm_eps)
        q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
        if c.layer_use_rope is not None and not c.layer_use_rope[i]:  # SmolLM3's NoPE layers
            return q, k, v
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def _attend(self, i, q, k, v, mask):
        """Eager attention: softmax in f32, cast back, as Transformers' eager_attention_forward."""
        c, p = self.cfg, f"model.layers.{i}.self_attn."
        n_rep = c.num_attention_heads // c.num_key_value_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)
        scale = c.attn_scale if c.gpt2 or c.gemma2 or c.granite else c.head_dim ** -0.5
        scores = softcap(torch.matmul(q, k.transpose(1, 2)) * scale, c.attn_softcap) + mask
        if c.gpt_oss:
            # GptOss's eager attention: each head's sink logit joins the softmax's denominator as an
            # extra column (max-subtracted with the rest, softmax in the compute dtype), then is dropped.
            sinks = self.w[p + "sinks"].to(scores.dtype).reshape(-1, 1, 1).expand(-1, scores.shape[1], 1)
            combined = torch.cat([scores, sinks], dim=-1)
            combined = combined - combined.max(dim=-1, keepdim=True).values
            probs = torch.softmax(combined, dim=-1, dtype=combined.dtype)[..., :-1]
        else:
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(0, 1).reshape(q.shape[1], -1)
        if c.gpt2:
            p = f"transformer.h.{i}.attn."
            return conv1d(out, self.w[p + "c_proj.weight"], self.w[p + "c_proj.bias"])
        return linear(out, self.w[p + "o_proj.weight"], self._b(p + "o_proj.bias"))

    def _mlp(self, i, x):
        p = f"model.layers.{i}.mlp."
        if self.cfg.gpt2:  # GPT2MLP: c_fc → gelu_new → c_proj
            p = f"transformer.h.{i}.mlp."
            h = gelu_new(conv1d(x, self.w[p + "c_fc.weight"], self.w[p + "c_fc.bias"]))
            return conv1d(h, self.w[p + "c_proj.weight"], self.w[p + "c_proj.bias"])
        if self.cfg.moe and self.cfg.moe.sparse[i]:
            self.min_router_gap = min(self.min_router_gap, reference_moe.min_router_gap(self.cfg.moe, self.w, i, x))
            if self.cfg.gpt_oss:
                return reference_moe.gpt_oss_block(self.cfg.moe, self.w, i, x)
            return reference_moe.sparse_block(self.cfg.moe, self.w, i, x)
        if self.cfg.fused:  # Phi3MLP: gate_up_proj output chunked into gate, up
            gate, up = linear(x, self.w[p + "gate_up_proj.weight"], None).chunk(2, dim=-1)
            return linear(up * F.silu(gate), self.w[p + "down_proj.weight"], None)
        gate = linear(x, self.w[p + "gate_proj.weight"], self._b(p + "gate_proj.bias"))
        up = linear(x, self.w[p + "up_proj.weight"], self._b(p + "up_proj.bias"))
        act = F.gelu(gate, approximate="tanh") if self.cfg.gemma2 else F.silu(gate)  # Gemma2: GeGLU
        return linear(act * up, self.w[p + "down_proj.weight"], self._b(p + "down_proj.bias"))

    def _norm(self, name, x):
        """RMSNorm, or GPT-2's LayerNorm (weight and bias) under its own names."""
        if self.cfg.gpt2:
            return F.layer_norm(x, (x.shape[-1],), self.w[name + ".weight"], self.w[name + ".bias"], self.cfg.rms_norm_eps)
        if self.cfg.gemma2:
            return gemma_rms_norm(x, self.w[name + ".weight"], self.cfg.rms_norm_eps)
        if self.cfg.gpt_oss:
            return gpt_oss_rms_norm(x, self.w[name + ".weight"], self.cfg.rms_norm_eps)
        return rms_norm(x, self.w[name + ".weight"], self.cfg.rms_norm_eps)

    def _embed(self, ids, positions):
        if self.cfg.gpt2:  # token embeddings plus learned position embeddings
            return F.embedding(ids, self.w["transformer.wte.weight"]) + F.embedding(positions, self.w["transformer.wpe.weight"])
        e = F.embedding(ids, self.w["model.embed_tokens.weight"])
        if self.cfg.gemma2:  # scaled by sqrt(hidden_size), the normalizer cast to the hidden dtype first
            e = e * torch.tensor(self.cfg.hidden_size ** 0.5, dtype=e.dtype)
        if self.cfg.granite:  # GraniteModel: inputs_embeds * embedding_multiplier
            e = e * self.cfg.embedding_multiplier
        return e

    def _layer(self, i, h, attention):
        if self.cfg.gpt2:
            p = f"transformer.h.{i}."
            h = h + attention(i, self._norm(p + "ln_1", h))
            return h + self._mlp(i, self._norm(p + "ln_2", h))
        if self.cfg.gemma2:  # Gemma2DecoderLayer: norms before and after both attention and MLP
            p = f"model.layers.{i}."
            h = h + self._norm(p + "post_attention_layernorm", attention(i, self._norm(p + "input_layernorm", h)))
            mlp_out = self._mlp(i, self._norm(p + "pre_feedforward_layernorm", h))
            return h + self._norm(p + "post_feedforward_layernorm", mlp_out)
        p, eps = f"model.layers.{i}.", self.cfg.rms_norm_eps
        if self.cfg.olmo2:  # Olmo2DecoderLayer: each sublayer's output normalized before its residual add
            h = h + rms_norm(attention(i, h), self.w[p + "post_attention_layernorm.weight"], eps)
            return h + rms_norm(self._mlp(i, h), self.w[p + "post_feedforward_layernorm.weight"], eps)
        norm = gpt_oss_rms_norm if self.cfg.gpt_oss else rms_norm
        m = self.cfg.residual_multiplier if self.cfg.granite else None  # GraniteDecoderLayer
        a = attention(i, norm(h, self.w[p + "input_layernorm.weight"], eps))
        h = h + (a * m if m is not None else a)
        f = self._mlp(i, norm(h, self.w[p + "post_attention_layernorm.weight"], eps))
        return h + (f * m if m is not None else f)

    def _check_ids(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
        if ids.numel() == 0:
            raise ValueError("empty input_ids")
        if int(ids.min()) < 0 or int(ids.max()) >= self.cfg.vocab_size:
            raise ValueError(f"token id out of range [0, {self.cfg.vocab_size})")
        return ids

    def _logits(self, h):
        h = self._norm("transformer.ln_f" if self.cfg.gpt2 else "model.norm", h)
        logits = softcap(linear(h, self.w["lm_head.weight"], None), self.cfg.final_softcap)
        if self.cfg.granite:  # GraniteForCausalLM: logits / logits_scaling
            logits = logits / self.cfg.logits_scaling
        return logits

    # -- public API ------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, input_ids):
        """Logits [T, vocab] (f32) of the whole sequence, batch 1, no cache."""
        ids = self._check_ids(input_ids)
        t = ids.numel()
        positions = torch.arange(t)
        tables = {kind: rope_cos_sin(*rope_parameters(self.cfg, seq_len=t, rope=self.cfg.rope_of(kind)), positions,
                                     self.dtype) for kind in set(self.cfg.layer_rope)}
        masks = {wnd: causal_mask(positions, positions, wnd, self.dtype) for wnd in set(self.cfg.layer_windows)}
        h = self._embed(ids, positions)

        def attention(i, x):
            q, k, v = self._qkv(i, x, *tables[self.cfg.layer_rope[i]])
            return self._attend(i, q, k, v, masks[self.cfg.layer_windows[i]])

        for i in range(self.cfg.num_hidden_layers):
            h = self._layer(i, h, attention)
        return self._logits(h).float()

    @torch.no_grad()
    def greedy(self, prompt_ids, n):
        """Greedy continuation of n tokens, recomputing the full forward every step (no cache).
        Returns (ids, margins): margins[s] = top-1 minus top-2 logit at step s."""
        ids = [int(x) for x in self._check_ids(prompt_ids)]
        out, margins = [], []
        for _ in range(n):
            logits = self.forward(ids)[-1]
            top = torch.topk(logits, 2).values
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            margins.append(float(top[0] - top[1]))
            ids.append(nxt)
        return out, margins

    # -- cached decode (Transformers generate() with a DynamicCache) ---------------------------
    def new_cache(self, max_len):
        return KVCache(self, max_len)

    @torch.no_grad()
    def forward_cached(self, cache, input_ids, all_logits=False):
        """Appends input_ids to the cache; returns logits of the last position (or all new ones)."""
        ids = self._check_ids(input_ids)
        t, start = ids.numel(), cache.length
        if start + t > cache.max_len:
            raise ValueError(f"cache holds {cache.max_len} positions, asked for {start + t}")
        positions = torch.arange(start, start + t)
        tables = {kind: r.cos_sin(positions, self.dtype) for kind, r in cache.rotary.items()}
        kv_positions = torch.arange(start + t)
        masks = {wnd: causal_mask(positions, kv_positions, wnd, self.dtype) for wnd in set(self.cfg.layer_windows)}
        h = self._embed(ids, positions)

        def attention(i, x):
            q, k, v = self._qkv(i, x, *tables[self.cfg.layer_rope[i]])
            cache.k[i][:, start:start + t] = k
            cache.v[i][:, start:start + t] = v
            return self._attend(i, q, cache.k[i][:, :start + t], cache.v[i][:, :start + t],
                                masks[self.cfg.layer_windows[i]])

        for i in range(self.cfg.num_hidden_layers):
            h = self._layer(i, h, attention)
        cache.length = start + t
        return self._logits(h if all_logits else h[-1:]).float()

    @torch.no_grad()
    def greedy_cached(self, prompt_ids, n):
        """Greedy continuation with a KV cache: prefill, then one token per step. Matches
        Transformers' generate(); differs from greedy() only for "dynamic" RoPE, whose inv_freq
        changes with the length while cached keys keep the rotation they were computed with.
        Returns (ids, margins) like greedy()."""
        ids = self._check_ids(prompt_ids)
        cache = self.new_cache(ids.numel() + n)
        logits = self.forward_cached(cache, ids)[-1]
        out, margins = [], []
        for step in range(n):
            top = torch.topk(logits, 2).values
            nxt = int(torch.argmax(logits))
            out.append(nxt)
            margins.append(float(top[0] - top[1]))
            if step + 1 < n:
                logits = self.forward_cached(cache, [nxt])[-1]
        return out, margins


class KVCache:
    """Per-layer key/value tensors [kv_heads, max_len, head_dim] plus the RoPE state."""

    def __init__(self, model, max_len):
        c = model.cfg
        shape = (c.num_key_value_heads, max_len, c.head_dim)
        self.k = [torch.zeros(shape, dtype=model.dtype) for _ in range(c.num_hidden_layers)]
        self.v = [torch.zeros(shape, dtype=model.dtype) for _ in range(c.num_hidden_layers)]
        self.length, self.max_len = 0, max_len
        self.rotary = {kind: RotaryState(c, c.rope_of(kind)) for kind in set(c.layer_rope)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="checkpoint dir (config.json + *.safetensors)")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--greedy", type=int, default=0, help="number of greedy tokens to generate")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32", help="compute dtype (default f32)")
    ap.add_argument("--out", required=True, help="output JSON path")
    args = ap.parse_args(argv)

    ids = [int(x) for x in args.prompt_ids.split(",") if x.strip()]
    model = Model(args.model, torch.float32 if args.dtype == "f32" else torch.bfloat16)
    logits = model.forward(ids)
    result = {"prompt_ids": ids, "logits_shape": list(logits.shape),
              "logits": [float(f"{v:.9g}") for v in logits.reshape(-1).tolist()]}
    if args.greedy:
        result["greedy_ids"], result["greedy_margins"] = model.greedy(ids, args.greedy)
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
