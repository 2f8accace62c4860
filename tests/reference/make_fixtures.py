#!/usr/bin/python3
"""Generates loom's end-to-end parity fixtures: tiny random checkpoints plus the reference
model's logits and greedy tokens for each (see README.md for the variants and the JSON schema).

  /usr/bin/python3 tests/reference/make_fixtures.py [OUT_DIR] [--only NAME ...] [--force] [--list]

OUT_DIR defaults to build/fixtures. A variant is skipped when its files exist and its
reference.json records the same inputs hash (generator sources + spec + torch version), so
re-running is cheap; each variant is written to a temporary directory and moved into place,
so an interrupted run never leaves a half-written variant that looks valid.
"""

import argparse
import copy
import hashlib
import json
import os
import random
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_checkpoint  # noqa: E402
import reference_model  # noqa: E402

PROMPT_LEN = 64
GREEDY_TOKENS = 32
PROMPT_CANDIDATES = 4  # prompt seeds tried per variant; the one with the safest greedy run wins
MIN_DISTINCT_GREEDY = 12  # fewer distinct greedy tokens than this makes a weak test
MIN_FEATURE_EFFECT = 1e-2  # ablating a variant's feature must move some logit at least this much
FORMAT = "loom-reference-v1"
SOURCES = ("make_fixtures.py", "make_checkpoint.py", "reference_model.py", "reference_moe.py", "safetensors_io.py")

# name -> (checkpoint knobs, feature ablated to prove the fixture exercises it, or None).
# Every variant is generated in f32 and bf16 ("<name>-f32", "<name>-bf16"); those in F16_VARIANTS
# also in f16 ("<name>-f16"), the third weight dtype loom reads.
VARIANTS = {
    "llama": (dict(arch="llama", hidden_size=128, intermediate_size=352, num_attention_heads=8,
                   num_key_value_heads=2, vocab_size=384, tie_word_embeddings=True, seed=1), None),
    "llama_mha_untied": (dict(arch="llama", hidden_size=96, intermediate_size=256, num_attention_heads=4,
                              num_key_value_heads=4, vocab_size=320, num_hidden_layers=3, seed=2), None),
    "llama_kv1_headdim": (dict(arch="llama", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                               num_key_value_heads=1, head_dim=32, vocab_size=256, seed=3), None),
    "llama_rope_linear": (dict(arch="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                               vocab_size=300, rope={"rope_type": "linear", "factor": 2.0},
                               rope_format="rope_parameters", seed=4), "rope"),
    "llama_rope_dynamic": (dict(arch="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                vocab_size=300, max_position_embeddings=32,
                                rope={"rope_type": "dynamic", "factor": 2.0}, seed=5), "rope"),
    "llama_rope_llama3": (dict(arch="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                               vocab_size=300, max_position_embeddings=512, rope_theta=500000.0,
                               rope={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                               tie_word_embeddings=True, seed=6), "rope"),
    "llama_rope_yarn": (dict(arch="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                             vocab_size=300, max_position_embeddings=256,
                             rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
                             seed=7), "rope"),
    "llama_rope_yarn_mscale": (dict(arch="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=300, max_position_embeddings=256,
                                    rope={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                                          "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 1.0,
                                          "mscale_all_dim": 0.5, "truncate": False},
                                    seed=8), "rope"),
    "llama_bias": (dict(arch="llama", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                        vocab_size=256, attention_bias=True, mlp_bias=True, seed=9), "bias"),
    "qwen2": (dict(arch="qwen2", hidden_size=96, intermediate_size=224, num_attention_heads=6,
                   num_key_value_heads=2, vocab_size=448, tie_word_embeddings=True, rope_theta=1000000.0,
                   seed=10), "bias"),
    "qwen2_sliding": (dict(arch="qwen2", hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                           vocab_size=256, num_hidden_layers=3, use_sliding_window=True, sliding_window=16,
                           max_window_layers=1, seed=11), "window"),
    "qwen3": (dict(arch="qwen3", hidden_size=64, intermediate_size=192, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=32, vocab_size=320, tie_word_embeddings=True,
                   rope_theta=1000000.0, seed=12), "qk_norm"),
    "mistral_sliding": (dict(arch="mistral", hidden_size=128, intermediate_size=320, num_attention_heads=8,
                             num_key_value_heads=2, vocab_size=384, sliding_window=16, seed=13), "window"),
    # Fused qkv_proj split 3:1:1 (GQA, uneven chunks) and gate_up_proj; 3/4 of each head rotated.
    "phi3": (dict(arch="phi3", hidden_size=96, intermediate_size=224, num_attention_heads=6,
                  num_key_value_heads=2, vocab_size=352, partial_rotary_factor=0.75, rms_norm_eps=1e-5,
                  seed=14), "partial_rope"),
    # Phi-3 128k's longrope: short factors up to the original 80 positions (the prompt), long ones
    # once decoding passes it; the cached keys keep the short rotation, as in Transformers.
    "phi3_longrope": (dict(arch="phi3", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=288, max_position_embeddings=320, rms_norm_eps=1e-5,
                           rope={"rope_type": "longrope", "original_max_position_embeddings": 80,
                                 "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5, 3.0, 4.0],
                                 "long_factor": [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0]},
                           seed=23), "rope"),
    "phi3_sliding": (dict(arch="phi3", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                          num_key_value_heads=1, vocab_size=288, sliding_window=16, rms_norm_eps=1e-5,
                          seed=15), "window"),
    # Conv1D weights [in, out], fused c_attn, LayerNorm with bias, learned positions, tied lm_head.
    "gpt2": (dict(arch="gpt2", hidden_size=96, intermediate_size=384, num_attention_heads=4, vocab_size=320,
                  max_position_embeddings=128, rms_norm_eps=1e-5, tie_word_embeddings=True, seed=16),
             "positions"),
    # The original OpenAI layout: no "transformer." prefix, attn.bias mask buffers, untied head.
    "gpt2_legacy": (dict(arch="gpt2", hidden_size=64, intermediate_size=192, num_attention_heads=2,
                         vocab_size=256, max_position_embeddings=100, rms_norm_eps=1e-5,
                         legacy_names=True, seed=17), "positions"),
    # Gemma2: sqrt(hidden)-scaled embeddings, four (1 + w) norms a layer, GeGLU, explicit head_dim with
    # query_pre_attn_scalar != head_dim, layers 0 and 2 sliding (window 16 < prompt), attention and
    # final soft-caps small enough to bind, tied lm_head (embed_std 0.1: the embeddings are scaled by
    # sqrt(hidden), and larger ones make the tied head repeat the current token; qk_scale 1: the (1 + w)
    # input norms already double q and k, and sharper attention makes f32 rounding move logits by ~1e-4).
    "gemma2": (dict(arch="gemma2", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, vocab_size=320, num_hidden_layers=4, sliding_window=16,
                    query_pre_attn_scalar=24, attn_logit_softcapping=5.0, final_logit_softcapping=10.0,
                    embed_std=0.1, qk_scale=1.0, tie_word_embeddings=True, seed=20), "softcap"),
    # Gemma3ForCausalLM: Gemma2's layer with (1 + w) q/k norms, six layers in the default 5:1 pattern
    # (sliding_window_pattern absent: layer 5 full), window 16 < the 64-token prompt, local RoPE base
    # 10k on the sliding layers and the global base 1e6 with linear scaling (factor 2) on the full one,
    # no soft-caps, tied lm_head; query_pre_attn_scalar = head_dim, as llama.cpp's gemma3 assumes
    # (so the GGUF oracle runs the same model).
    "gemma3": (dict(arch="gemma3_text", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, vocab_size=320, num_hidden_layers=6, sliding_window=16,
                    query_pre_attn_scalar=32, rope_theta=1000000.0, rope={"rope_type": "linear", "factor": 2.0},
                    embed_std=0.1, qk_scale=2.0, tie_word_embeddings=True, seed=26), "window"),
    # Gemma3ForConditionalGeneration (text_config, language_model.model.* names, vision-tower tensors
    # that loom skips): explicit layer_types with two full layers, sliding_window_pattern 3 in the
    # file (ignored when layer_types is given), query_pre_attn_scalar 24 != head_dim, local base 100.
    "gemma3_mm": (dict(arch="gemma3", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                       num_key_value_heads=1, head_dim=16, vocab_size=288, num_hidden_layers=5, sliding_window=8,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                                    "full_attention"], sliding_window_pattern=3,
                       query_pre_attn_scalar=24, rope_theta=1000000.0, rope_local_base_freq=100.0,
                       embed_std=0.1, qk_scale=2.0, tie_word_embeddings=True, seed=27), "local_rope"),
    # The same in Transformers 5.x's layout: model.language_model.* names, per-layer-type
    # rope_parameters (linear factor 4 on the full layers), final soft-cap in the file (not applied by
    # Gemma3ForConditionalGeneration).
    "gemma3_mm_v5": (dict(arch="gemma3", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=288, num_hidden_layers=4, sliding_window=12,
                          sliding_window_pattern=2, query_pre_attn_scalar=16, rope_theta=50000.0,
                          rope={"rope_type": "linear", "factor": 4.0}, rope_format="rope_parameters",
                          final_logit_softcapping=1.0, mm_layout="v5",
                          embed_std=0.1, qk_scale=2.0, tie_word_embeddings=True, seed=28), "rope"),
    # SmolLM3: Llama's layer with a NoPE layer every 4th (default no_rope_layer_interval: layers 3, 7
    # skip RoPE), q/k/v/o biases, tied lm_head, theta 2e6; use_sliding_window with window 16 slides
    # exactly the NoPE layers.
    "smollm3": (dict(arch="smollm3", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=288, num_hidden_layers=8, attention_bias=True,
                     rope_theta=2000000.0, use_sliding_window=True, sliding_window=16,
                     tie_word_embeddings=True, seed=29), "nope"),
    # Phi-4-mini: Phi-3's fused layout with 3/4 of each head rotated, tied embeddings (no lm_head in
    # the file), GQA 3:1, and a window far past the context on every layer (as Phi-4-mini's config).
    "phi4_mini": (dict(arch="phi3", hidden_size=96, intermediate_size=224, num_attention_heads=6,
                       num_key_value_heads=2, vocab_size=352, partial_rotary_factor=0.75, rms_norm_eps=1e-5,
                       tie_word_embeddings=True, sliding_window=262144, seed=30), "partial_rope"),
    # Olmo2: no input norm, RMSNorms on the attention and MLP outputs before each residual add, q/k
    # RMSNorms over the whole projections (q 64 wide, k 32), GQA, untied; eps 1e-5.
    "olmo2": (dict(arch="olmo2", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=288, num_hidden_layers=3, rms_norm_eps=1e-5,
                   seed=31), "qk_norm"),
    # Granite: μP multipliers far from 1 (embeddings ×4, attention scale 1/8 instead of 1/4, residual
    # branches ×0.5, logits / 2), attention and MLP biases, untied lm_head.
    "granite": (dict(arch="granite", hidden_size=64, intermediate_size=160, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=288, attention_bias=True, mlp_bias=True, logit_scale=6.0,
                     granite={"embedding_multiplier": 4.0, "attention_multiplier": 0.125,
                              "residual_multiplier": 0.5, "logits_scaling": 2.0}, seed=32), "multipliers"),
    # Sparse MoE: 4 experts, top-2 renormalised, per-expert w1/w3/w2 tensors stacked by loom's load plan.
    "mixtral": (dict(arch="mixtral", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=256, rope_theta=1000000.0, rms_norm_eps=1e-5,
                     moe={"num_local_experts": 4, "num_experts_per_tok": 2}, seed=21), "routing"),
    # Qwen2-MoE: 3 layers, layer 1 dense (mlp_only_layers), top-2 not renormalised, a shared expert
    # behind its sigmoid gate, q/k/v biases, tied lm_head.
    "qwen2_moe": (dict(arch="qwen2_moe", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                       num_key_value_heads=2, vocab_size=288, num_hidden_layers=3, tie_word_embeddings=True,
                       moe={"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                            "shared_expert_intermediate_size": 80, "norm_topk_prob": False,
                            "decoder_sparse_step": 1, "mlp_only_layers": [1]}, seed=22), "shared_expert"),
    # Qwen3-MoE as llama.cpp's qwen3moe runs it (every layer sparse, top-k renormalised): q/k norms,
    # 8 experts top-3, untied (a tied head repeats tokens at this width); hidden and expert widths of
    # 256 so K-quant blocks fit every matrix (the llama.cpp oracle runs its GGUF files quantized);
    # embed_std 1: the embedding dominates the residual stream, so quantization noise (each engine
    # rounds activations its own way) moves the logits less.
    "qwen3_moe": (dict(arch="qwen3_moe", hidden_size=256, intermediate_size=384, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=64, vocab_size=320,
                       rope_theta=1000000.0, embed_std=1.0,
                       moe={"num_experts": 8, "num_experts_per_tok": 3, "moe_intermediate_size": 256,
                            "norm_topk_prob": True, "decoder_sparse_step": 1, "mlp_only_layers": []},
                       seed=24), "routing"),
    # Qwen3-MoE's dense layers: decoder_sparse_step 2 makes layers 1, 3, 5 sparse, mlp_only_layers
    # takes 3 back (dense MLPs of intermediate_size); top-2 not renormalised; q/k/v/o biases; qk_scale 2
    # (six layers of sharper attention put f32 rounding near the 1e-4 logit bound).
    "qwen3_moe_dense_layers": (dict(arch="qwen3_moe", hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=32, vocab_size=288, num_hidden_layers=6,
                                    attention_bias=True, rope_theta=1000000.0, qk_scale=2.0,
                                    moe={"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 48,
                                         "norm_topk_prob": False, "decoder_sparse_step": 2, "mlp_only_layers": [3]},
                                    seed=25), "norm_topk"),
    # gpt-oss: q/k/v/o biases, a sink logit per head, layers 0 and 2 sliding (window 16 < prompt), the
    # default YaRN rope, 4 biased experts top-2 with a softmax over the two logits, the clamped SwiGLU
    # binding (expert_scale 4), head_dim * heads != hidden as in the released models; widths multiples
    # of 32 so the experts fit MXFP4 blocks. The unnormalised expert outputs make f32 rounding move the
    # logits by ~1e-4 at the default scales (PyTorch f32 against f64: 8.6e-5); embed_std 1, qk_scale 2
    # and logit_scale 1.5 bring that to 2.6e-5, inside the parity bound with room for loom's own.
    "gpt_oss": (dict(arch="gpt_oss", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, vocab_size=288, num_hidden_layers=4,
                     sliding_window=16, expert_scale=4.0, rms_norm_eps=1e-5, embed_std=1.0, qk_scale=2.0,
                     logit_scale=1.5, moe={"num_local_experts": 4, "num_experts_per_tok": 2}, seed=26), "routing"),
    # The same model with its experts stored as OpenAI ships gpt-oss: MXFP4 *_blocks / *_scales
    # (the reference dequantizes the very blocks loom loads).
    "gpt_oss_mxfp4": (dict(arch="gpt_oss", hidden_size=64, intermediate_size=96, num_attention_heads=4,
                           num_key_value_heads=2, head_dim=32, vocab_size=288, num_hidden_layers=4,
                           sliding_window=16, expert_scale=4.0, rms_norm_eps=1e-5, embed_std=1.0, qk_scale=2.0,
                           logit_scale=1.5, mxfp4_experts=True,
                           moe={"num_local_experts": 4, "num_experts_per_tok": 2}, seed=26), "routing"),
}
# Written but not listed in index.json: their weights are quantized, so the tests that take every
# listed variant to the f32 bound (parity_test.cc, the exporters) do not apply; tests/models/
# gpt_oss_test.cc holds them to the reference on their own terms.
UNLISTED = ("gpt_oss_mxfp4",)
MIN_ROUTER_GAP = 1e-3  # k-th vs (k+1)-th router logit: closer than this, f32 rounding could swap experts
DTYPES = ("f32", "bf16")
F16_VARIANTS = ("llama", "qwen3", "gemma2")


def variant_specs():
    """{full name: (spec, feature)} for every variant and dtype."""
    out = {}
    for name, (knobs, feature) in VARIANTS.items():
        for dtype in DTYPES + (("f16",) if name in F16_VARIANTS else ()):
            out[f"{name}-{dtype}"] = (dict(knobs, dtype=dtype), feature)
    return out


def inputs_hash(spec):
    h = hashlib.sha256()
    for src in SOURCES:
        with open(os.path.join(HERE, src), "rb") as f:
            h.update(src.encode() + b"\0" + f.read() + b"\0")
    h.update(json.dumps(spec, sort_keys=True).encode())
    h.update(torch.__version__.encode())
    return h.hexdigest()


def is_current(vdir, digest):
    needed = ("config.json", "model.safetensors", "generation_config.json", "reference.json")
    if not all(os.path.exists(os.path.join(vdir, n)) for n in needed):
        return False
    try:
        with open(os.path.join(vdir, "reference.json")) as f:
            return json.load(f).get("inputs_hash") == digest
    except (OSError, ValueError):
        return False


def feature_effect(model, feature, prompt, logits):
    """Max |logit change| when the variant's feature is switched off: a fixture whose feature
    does not change the output would not test it."""
    cfg, w = model.cfg, model.w
    saved_cfg, saved_w = copy.deepcopy(cfg.__dict__), dict(w)
    try:
        if feature == "rope":
            theta = cfg.rope["rope_theta"]
            cfg.rope = {"rope_type": "default", "rope_theta": theta,
                        "partial_rotary_factor": cfg.rope["partial_rotary_factor"]}
        elif feature == "partial_rope":  # rotate every dim instead of the first rotary_dim
            cfg.rope = dict(cfg.rope, partial_rotary_factor=1.0)
        elif feature == "positions":  # GPT-2's learned position table switched off
            for k in [k for k in w if k.endswith("wpe.weight")]:
                w[k] = torch.zeros_like(w[k])
        elif feature == "softcap":  # Gemma2's attention and final logit soft-caps both off
            cfg.attn_softcap = cfg.final_softcap = None
        elif feature == "routing":  # every expert, softmax-weighted, instead of the top-k
            cfg.moe.top_k = cfg.moe.num_experts
        elif feature == "norm_topk":  # the top-k weights renormalised when the config says not to
            cfg.moe.norm_topk_prob = not cfg.moe.norm_topk_prob
        elif feature == "shared_expert":  # Qwen2-MoE's shared expert contributes nothing
            for k in [k for k in w if ".shared_expert.down_proj." in k]:
                w[k] = torch.zeros_like(w[k])
        elif feature == "local_rope":  # Gemma3's sliding layers rotate with the global RoPE instead
            cfg.layer_rope = ["global"] * cfg.num_hidden_layers
        elif feature == "nope":  # SmolLM3's NoPE layers rotate like the others
            cfg.layer_use_rope = None
        elif feature == "multipliers":  # Granite's μP multipliers all 1 (Llama's attention scale)
            cfg.embedding_multiplier = cfg.residual_multiplier = cfg.logits_scaling = 1.0
            cfg.attn_scale = cfg.head_dim ** -0.5
        elif feature == "window":
            cfg.layer_windows = [None] * cfg.num_hidden_layers
        elif feature == "bias":
            for k in [k for k in w if k.endswith(".bias")]:
                w[k] = torch.zeros_like(w[k])
        elif feature == "qk_norm":
            for k in [k for k in w if k.endswith(("q_norm.weight", "k_norm.weight"))]:
                w[k] = torch.ones_like(w[k])
            # Unit-weight RMSNorm still normalizes; switching the norm off is the real ablation.
            cfg.qk_norm = False
        else:
            raise AssertionError(feature)
        return float((model.forward(prompt) - logits).abs().max())
    finally:
        cfg.__dict__.update(saved_cfg)
        w.clear()
        w.update(saved_w)


def choose_prompt(model, spec, vocab):
    """Tries PROMPT_CANDIDATES prompt seeds; keeps the one whose greedy run is most robust:
    enough distinct tokens, cached == uncached (except dynamic RoPE, where they legitimately
    differ), and the largest smallest top-1/top-2 logit margin."""
    dynamic = model.cfg.rope["rope_type"] in ("dynamic", "longrope")
    best = None
    for k in range(PROMPT_CANDIDATES):
        seed = spec["seed"] * 1000 + k
        rng = random.Random(seed)
        prompt = [rng.randrange(vocab) for _ in range(PROMPT_LEN)]
        model.min_router_gap = float("inf")  # MoE: no expert choice may be a near tie either
        ids, margins = model.greedy(prompt, GREEDY_TOKENS)
        cached, cached_margins = model.greedy_cached(prompt, GREEDY_TOKENS)
        ok = len(set(ids)) >= MIN_DISTINCT_GREEDY and (dynamic or cached == ids)
        ok = ok and model.min_router_gap >= MIN_ROUTER_GAP
        score = (ok, min(margins + cached_margins))
        if best is None or score > best[0]:
            best = (score, seed, prompt, ids, margins, cached, cached_margins)
    return best


def generate(name, spec, feature, out_dir, digest):
    tmp = os.path.join(out_dir, f".{name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    cfg = make_checkpoint.make_checkpoint(tmp, **spec)
    model = reference_model.Model(tmp, torch.float32)
    (ok, min_margin), seed, prompt, ids, margins, cached, cached_margins = choose_prompt(model, spec, model.cfg.vocab_size)
    if not ok:
        raise RuntimeError(f"{name}: no prompt seed gave a non-degenerate greedy run; tune the spec")
    logits = model.forward(prompt)
    checks = {"distinct_greedy_tokens": len(set(ids)), "min_greedy_margin": min_margin,
              "greedy_cached_equals_uncached": cached == ids,
              "layer_windows": model.cfg.layer_windows}
    if model.cfg.moe:  # the expert choice of every prompt and greedy position must not be a near tie
        model.min_router_gap = float("inf")
        model.forward(prompt)
        model.greedy_cached(prompt, GREEDY_TOKENS)
        checks["min_router_logit_gap"] = model.min_router_gap
        if model.min_router_gap < MIN_ROUTER_GAP:
            raise RuntimeError(f"{name}: router logits tie within {model.min_router_gap:g}; tune the spec")
    if feature is not None:
        effect = feature_effect(model, feature, prompt, logits)
        checks["feature"] = feature
        checks["feature_max_abs_logit_change"] = effect
        if effect < MIN_FEATURE_EFFECT:
            raise RuntimeError(f"{name}: switching off {feature} changes logits by only {effect:g}")
    ref = {
        "format": FORMAT,
        "variant": name,
        "model_type": cfg["model_type"],
        "checkpoint_dtype": cfg["torch_dtype"],
        "compute_dtype": "float32",
        "prompt_seed": seed,
        "prompt_ids": prompt,
        "logits_shape": list(logits.shape),
        "logits": [float(f"{v:.9g}") for v in logits.reshape(-1).tolist()],
        "greedy_new_tokens": GREEDY_TOKENS,
        "greedy_ids": ids,
        "greedy_margins": [float(f"{m:.6g}") for m in margins],
        "greedy_ids_cached": cached,
        "greedy_margins_cached": [float(f"{m:.6g}") for m in cached_margins],
        "checks": checks,
        "spec": spec,
        "inputs_hash": digest,
    }
    if cfg["torch_dtype"] == "bfloat16":
        # Transformers' eager bf16 forward (bf16 activations, f32 accumulation): how far
        # upstream's own bf16 execution sits from the f32 logits above, the budget for
        # loom's matmul precision "medium".
        bf16_logits = reference_model.Model(tmp, torch.bfloat16).forward(prompt).float()
        ref["logits_bf16_compute"] = [float(f"{v:.9g}") for v in bf16_logits.reshape(-1).tolist()]
    with open(os.path.join(tmp, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    final = os.path.join(out_dir, name)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return checks


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir", nargs="?", default="build/fixtures")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="variants to (re)generate, e.g. llama-f32 qwen3")
    ap.add_argument("--force", action="store_true", help="regenerate even when up to date")
    ap.add_argument("--list", action="store_true", help="print the variant names and exit")
    args = ap.parse_args(argv)

    specs = variant_specs()
    if args.list:
        print("\n".join(specs))
        return 0
    selected = list(specs)
    if args.only:
        unknown = [n for n in args.only if n not in specs and n not in VARIANTS]
        if unknown:
            ap.error(f"unknown variants {unknown}; see --list")
        selected = [n for n in specs if n in args.only or n.rsplit("-", 1)[0] in args.only]

    torch.set_num_threads(1)  # reduction order fixed, so reruns give identical bytes
    os.makedirs(args.out_dir, exist_ok=True)
    for stale in os.listdir(args.out_dir):  # left behind by an interrupted run
        if stale.startswith(".") and ".tmp" in stale:
            shutil.rmtree(os.path.join(args.out_dir, stale), ignore_errors=True)
    start = time.time()
    for i, name in enumerate(selected, 1):
        spec, feature = specs[name]
        digest = inputs_hash(spec)
        vdir = os.path.join(args.out_dir, name)
        tag = f"[{i}/{len(selected)}] {name}"
        if not args.force and is_current(vdir, digest):
            print(f"{tag}: up to date", flush=True)
            continue
        t = time.time()
        checks = generate(name, spec, feature, args.out_dir, digest)
        extra = ""
        if "feature" in checks:
            extra = f", {checks['feature']} effect {checks['feature_max_abs_logit_change']:.3g}"
        print(f"{tag}: {checks['distinct_greedy_tokens']} distinct greedy tokens, min margin "
              f"{checks['min_greedy_margin']:.3g}{extra}, cached==uncached "
              f"{checks['greedy_cached_equals_uncached']} ({time.time() - t:.1f}s)", flush=True)

    index = {"format": FORMAT, "variants": [
        {"name": n, "arch": s["arch"], "dtype": s["dtype"], "feature": f} for n, (s, f) in specs.items()
        if n.rsplit("-", 1)[0] not in UNLISTED]}
    with open(os.path.join(args.out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    print(f"fixtures in {args.out_dir} ({time.time() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
