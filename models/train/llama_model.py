"""LlamaForCausalLM in plain PyTorch, with Transformers' semantics and names.

No Transformers on our machines, so this mirrors modeling_llama.py closely
enough that a state dict saved from here loads into Transformers (and loom)
unchanged:
  * RMSNorm computed in float32, cast back, then scaled by the weight;
  * RoPE with rotate_half over the whole head (cos/sin = cat(freqs, freqs)),
    inv_freq = 1 / theta^(2i/head_dim), positions 0..T-1;
  * grouped-query attention (k/v heads repeated, repeat_kv), scale
    1/sqrt(head_dim), causal mask, softmax in float32;
  * SiLU-gated MLP down(silu(gate(x)) * up(x)); no biases anywhere;
  * lm_head tied to model.embed_tokens (no lm_head.weight in the state dict).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def llama_config(vocab_size, bos_token_id, eos_token_id, hidden_size=256, intermediate_size=688,
                 num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
                 max_position_embeddings=512, rms_norm_eps=1e-5, rope_theta=10000.0,
                 torch_dtype="float32"):
    """The config.json dict Transformers' LlamaConfig expects."""
    if hidden_size % num_attention_heads or num_attention_heads % num_key_value_heads:
        raise ValueError("hidden_size must divide by heads and heads by kv heads")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": hidden_size // num_attention_heads,
        "hidden_act": "silu",
        "max_position_embeddings": max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": rms_norm_eps,
        "rope_theta": rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "pretraining_tp": 1,
        "tie_word_embeddings": True,
        "use_cache": True,
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
        "pad_token_id": None,
        "torch_dtype": torch_dtype,
    }


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rope_cos_sin(head_dim, theta, seq_len, device=None):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float().to(device) / head_dim))
    pos = torch.arange(seq_len, dtype=torch.float32, device=device)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg["num_attention_heads"]
        self.n_kv = cfg["num_key_value_heads"]
        self.head_dim = cfg["head_dim"]
        d = cfg["hidden_size"]
        self.q_proj = nn.Linear(d, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(d, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, d, bias=False)

    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim).transpose(1, 2)
        cos = cos.to(q.dtype)
        sin = sin.to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.n_heads // self.n_kv
        k = k.repeat_interleave(rep, dim=1)  # == Transformers' repeat_kv
        v = v.repeat_interleave(rep, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        scores = scores + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, f = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(d, f, bias=False)
        self.up_proj = nn.Linear(d, f, bias=False)
        self.down_proj = nn.Linear(f, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if not cfg.get("tie_word_embeddings", False):
            raise ValueError("this trainer only builds tied-embedding models")
        self.cfg = cfg
        self.model = LlamaModel(cfg)
        self._rope_len = 0

    def init_weights(self, generator):
        # Transformers' init (normal(0, initializer_range), norms at 1), with the
        # residual output projections scaled down by sqrt(2 * layers) as in
        # GPT-2, which trains noticeably faster at this depth.
        std = self.cfg["initializer_range"]
        out_std = std / math.sqrt(2 * self.cfg["num_hidden_layers"])
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    s = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
                    p.copy_(torch.randn(p.shape, generator=generator) * s)

    def _rope(self, t, device):
        if t > self._rope_len:
            self._cos, self._sin = rope_cos_sin(self.cfg["head_dim"], self.cfg["rope_theta"], t, device)
            self._rope_len = t
        return self._cos[:t], self._sin[:t]

    def forward(self, input_ids):
        """input_ids [B, T] -> logits [B, T, vocab] in float32."""
        _, t = input_ids.shape
        x = self.model.embed_tokens(input_ids)
        cos, sin = self._rope(t, input_ids.device)
        mask = torch.full((t, t), float("-inf"), device=input_ids.device).triu(1)
        for layer in self.model.layers:
            x = layer(x, cos, sin, mask)
        x = self.model.norm(x)
        return F.linear(x, self.model.embed_tokens.weight).float()

    def state_dict_hf(self):
        """Transformers' parameter names; the tied lm_head is not stored."""
        return {k: v.detach().contiguous() for k, v in self.state_dict().items()}

    def num_parameters(self):
        return sum(p.numel() for p in self.parameters())

