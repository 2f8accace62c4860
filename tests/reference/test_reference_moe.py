"""Checks of the reference's MoE blocks (reference_moe.py) against simpler forms: a dense
formulation (every expert on every token, weighted by a top-k mask), a one-expert Mixtral equal
to its Mistral twin, and Qwen2-MoE's and Qwen3-MoE's choice of sparse layers."""

import os
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_checkpoint  # noqa: E402
import reference_model as rm  # noqa: E402
import reference_moe  # noqa: E402
import safetensors_io  # noqa: E402

torch.set_num_threads(1)

QWEN_MOE = {"num_experts": 5, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
            "shared_expert_intermediate_size": 40, "norm_topk_prob": False, "mlp_only_layers": [1]}


def dense_moe(moe, w, layer, x):
    """Every expert on every token; the weight is the full softmax where the expert ranks in the top k
    (by sorting, not topk), renormalised over those when norm_topk_prob, else 0."""
    b = f"model.layers.{layer}.{moe.prefix}."
    probs = torch.softmax(x @ w[b + "gate.weight"].T, dim=-1)
    rank = torch.argsort(torch.argsort(-probs, dim=-1), dim=-1)
    mask = (rank < moe.top_k).to(x.dtype)
    weights = probs * mask
    if moe.norm_topk_prob:
        weights = weights / weights.sum(-1, keepdim=True)
    g, u, d = moe.names
    out = torch.zeros_like(x)
    for e in range(moe.num_experts):
        p = f"{b}experts.{e}."
        y = (F.silu(x @ w[p + g + ".weight"].T) * (x @ w[p + u + ".weight"].T)) @ w[p + d + ".weight"].T
        out += weights[:, e:e + 1] * y
    if moe.shared_size:
        p = b + "shared_expert."
        y = (F.silu(x @ w[p + "gate_proj.weight"].T) * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T
        out += torch.sigmoid(x @ w[b + "shared_expert_gate.weight"].T) * y
    return out


class MoeTest(unittest.TestCase):
    def check_dense(self, arch, moe_knobs, renorm):
        with tempfile.TemporaryDirectory() as tmp:
            make_checkpoint.make_checkpoint(tmp, arch=arch, hidden_size=32, intermediate_size=48,
                                            num_hidden_layers=3, moe=moe_knobs, seed=5)
            m = rm.Model(tmp)
        moe = m.cfg.moe
        self.assertEqual(moe.norm_topk_prob, renorm)
        x = torch.randn(11, 32, generator=torch.Generator().manual_seed(1))
        for layer in range(3):
            if moe.sparse[layer]:
                torch.testing.assert_close(reference_moe.sparse_block(moe, m.w, layer, x), dense_moe(moe, m.w, layer, x),
                                           rtol=1e-5, atol=1e-5)

    def test_mixtral_matches_dense_formulation(self):
        self.check_dense("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}, True)

    def test_qwen2_moe_matches_dense_formulation(self):
        self.check_dense("qwen2_moe", QWEN_MOE, False)
        self.check_dense("qwen2_moe", dict(QWEN_MOE, norm_topk_prob=True, num_experts_per_tok=3), True)

    def test_qwen2_moe_sparse_layers(self):
        c = dict(reference_moe.QWEN2_MOE_DEFAULTS, num_experts=4, mlp_only_layers=[1])
        self.assertEqual(reference_moe.MoeConfig("qwen2_moe", c, 3, 8).sparse, [True, False, True])
        c = dict(c, mlp_only_layers=None, decoder_sparse_step=2)
        self.assertEqual(reference_moe.MoeConfig("qwen2_moe", c, 4, 8).sparse, [False, True, False, True])

    def test_qwen3_moe_matches_dense_formulation(self):
        knobs = {"num_experts": 6, "num_experts_per_tok": 3, "moe_intermediate_size": 24, "mlp_only_layers": [0]}
        self.check_dense("qwen3_moe", dict(knobs, norm_topk_prob=True), True)
        self.check_dense("qwen3_moe", dict(knobs, norm_topk_prob=False), False)

    def test_qwen3_moe_sparse_layers_and_no_shared_expert(self):
        c = dict(reference_moe.QWEN3_MOE_DEFAULTS, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=2,
                 mlp_only_layers=[3])
        moe = reference_moe.MoeConfig("qwen3_moe", c, 6, 8)
        self.assertEqual(moe.sparse, [False, True, False, False, False, True])
        self.assertEqual(moe.shared_size, 0)
        self.assertEqual(reference_moe.QWEN3_MOE_DEFAULTS["norm_topk_prob"], False)

    def test_gpt_oss_block_matches_dense_formulation(self):
        """Transformers' inference path of GptOssExperts: every expert on every token (bmm over the
        stacked [E, in, out] weights), weighted by the top-k softmax scattered into E columns."""
        with tempfile.TemporaryDirectory() as tmp:
            make_checkpoint.make_checkpoint(tmp, arch="gpt_oss", hidden_size=32, intermediate_size=24,
                                            num_hidden_layers=2, sliding_window=8, expert_scale=4.0, seed=6,
                                            moe={"num_local_experts": 5, "num_experts_per_tok": 3})
            m = rm.Model(tmp)
        moe, w = m.cfg.moe, m.w
        x = torch.randn(13, 32, generator=torch.Generator().manual_seed(2))
        b = "model.layers.1.mlp."
        logits = x @ w[b + "router.weight"].T + w[b + "router.bias"]
        top, idx = torch.topk(logits, 3, dim=-1)
        scores = torch.zeros_like(logits).scatter_(1, idx, torch.softmax(top, dim=1))
        h = torch.bmm(x.expand(5, -1, -1), w[b + "experts.gate_up_proj"]) + w[b + "experts.gate_up_proj_bias"][:, None, :]
        gate, up = h[..., ::2], h[..., 1::2]
        self.assertGreater(int((gate > 7.0).sum()), 0, "expert_scale 4 should make the clamp bind")
        gate, up = gate.clamp(max=7.0), up.clamp(min=-7.0, max=7.0)
        y = torch.bmm((up + 1) * gate * torch.sigmoid(1.702 * gate), w[b + "experts.down_proj"])
        y = y + w[b + "experts.down_proj_bias"][:, None, :]
        dense = (y * scores.T[..., None]).sum(0)
        torch.testing.assert_close(reference_moe.gpt_oss_block(moe, w, 1, x), dense, rtol=1e-5, atol=1e-5)

    def test_gpt_oss_sinks_and_layers(self):
        """Each head's sink joins its softmax's denominator only; a very negative one leaves plain
        attention. Layer 0 slides, layer 1 does not (GptOssConfig's default layer_types), the default rope is
        YaRN, and cached decoding equals recomputation."""
        with tempfile.TemporaryDirectory() as tmp:
            make_checkpoint.make_checkpoint(tmp, arch="gpt_oss", hidden_size=32, intermediate_size=24,
                                            num_hidden_layers=2, sliding_window=8, seed=7,
                                            moe={"num_local_experts": 4, "num_experts_per_tok": 2})
            m = rm.Model(tmp)
        self.assertEqual(m.cfg.layer_windows, [8, None])
        self.assertEqual(m.cfg.rope["rope_type"], "yarn")
        c, p = m.cfg, "model.layers.1.self_attn."
        gen = torch.Generator().manual_seed(3)
        t = 6
        q = torch.randn(c.num_attention_heads, t, c.head_dim, generator=gen)
        k = torch.randn(c.num_key_value_heads, t, c.head_dim, generator=gen)
        v = torch.randn(c.num_key_value_heads, t, c.head_dim, generator=gen)
        pos = torch.arange(t)
        mask = rm.causal_mask(pos, pos, None, torch.float32)
        rep = c.num_attention_heads // c.num_key_value_heads
        scores = q @ k.repeat_interleave(rep, 0).transpose(1, 2) * c.head_dim ** -0.5 + mask
        sink = m.w[p + "sinks"][:, None, None]

        def attend(probs):
            out = (probs @ v.repeat_interleave(rep, 0)).transpose(0, 1).reshape(t, -1)
            return out @ m.w[p + "o_proj.weight"].T + m.w[p + "o_proj.bias"]

        # exp(s_j) / (exp(sink) + sum_j exp(s_j)): the sink takes mass, no value is read for it.
        probs = torch.exp(scores) / (torch.exp(sink) + torch.exp(scores).sum(-1, keepdim=True))
        torch.testing.assert_close(m._attend(1, q, k, v, mask), attend(probs), rtol=1e-5, atol=1e-5)
        self.assertLess(float(probs.sum(-1).max()), 0.999)
        m.w[p + "sinks"] = torch.full_like(m.w[p + "sinks"], -1e4)
        torch.testing.assert_close(m._attend(1, q, k, v, mask), attend(torch.softmax(scores, -1)), rtol=1e-5, atol=1e-5)
        prompt = [3, 17, 5, 99, 42, 7, 11, 13, 200, 1, 4, 9]
        ids, _ = m.greedy(prompt, 6)
        cached, _ = m.greedy_cached(prompt, 6)
        self.assertEqual(ids, cached)

    def test_dense_architectures_have_no_moe(self):
        # make_fixtures reads cfg.moe for every variant, GPT-2's own config path included.
        for arch in ("gpt2", "llama", "gemma2"):
            with tempfile.TemporaryDirectory() as tmp:
                make_checkpoint.make_checkpoint(tmp, arch=arch, seed=3)
                self.assertIsNone(rm.Model(tmp).cfg.moe, arch)

    def test_one_expert_mixtral_equals_mistral_twin(self):
        """One expert, chosen with weight 1: Mixtral is Mistral with that expert as its MLP."""
        with tempfile.TemporaryDirectory() as tmp:
            mix = os.path.join(tmp, "mixtral")
            make_checkpoint.make_checkpoint(mix, arch="mixtral", moe={"num_local_experts": 1, "num_experts_per_tok": 1},
                                            num_key_value_heads=2, seed=9)
            a = rm.Model(mix)
            twin = os.path.join(tmp, "mistral")
            make_checkpoint.make_checkpoint(twin, arch="mistral", num_key_value_heads=2, rope_theta=a.cfg.rope["rope_theta"],
                                            rms_norm_eps=a.cfg.rms_norm_eps, seed=9)
            b = rm.Model(twin)
        for k in list(b.w):
            if ".mlp." not in k:
                b.w[k] = a.w[k]
        for i in range(2):
            p = f"model.layers.{i}.block_sparse_moe.experts.0."
            for src, dst in (("w1", "gate_proj"), ("w3", "up_proj"), ("w2", "down_proj")):
                b.w[f"model.layers.{i}.mlp.{dst}.weight"] = a.w[p + src + ".weight"]
        prompt = [3, 17, 5, 99, 42, 7]
        torch.testing.assert_close(a.forward(prompt), b.forward(prompt), rtol=1e-5, atol=1e-5)

if __name__ == "__main__":
    unittest.main()
