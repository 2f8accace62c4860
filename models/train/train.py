#!/usr/bin/python3
"""Trains loom's default model (a small LlamaForCausalLM) and writes it in
Hugging Face layout: config.json, model.safetensors, tokenizer.json,
tokenizer_config.json, generation_config.json and README.md (the model card).

Inputs (from --work, made by prepare_corpus.py, train_tokenizer.js, tokenize.js):
  train.bin valid.bin   token ids, uint16 LE, whole files encoded without
                        special tokens
  tokenizer.json        the byte-level BPE tokenizer

Training samples: a window of --seq-len text tokens starting at a uniformly
random token offset of train.bin, preceded by BOS; the model sees BOS + the
first seq_len-1 tokens and predicts all seq_len tokens (so every position of
a window of seq_len predicts a text token, as in validation).

Validation loss: see validation_loss() - the exact procedure is also in the
model card, because `loom perplexity` recomputes it.
"""
import argparse
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_model import LlamaForCausalLM, llama_config  # noqa: E402
import safetensors_io  # noqa: E402
import write_card  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
CHAT_END = "<|end|>"
PROMPTS = ["In the beginning", "And the LORD said unto Moses", "Blessed are"]

# Roles other than system/assistant are rendered as user turns: a template
# that only uses for/if/elif/+ runs in every Jinja subset (no raise_exception).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ '<|system|>\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ '<|assistant|>\n' }}"
    "{% else %}{{ '<|user|>\n' }}{% endif %}"
    "{{ message['content'] + '<|end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def cpu_seconds():
    """User+system CPU time of this process (all threads): on a busy shared
    machine it shows what the run costs, which wall time does not."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def log(msg, fh=None):
    line = time.strftime("%H:%M:%S ") + msg
    print(line, flush=True)
    if fh:
        fh.write(line + "\n")
        fh.flush()


def load_ids(path):
    ids = np.fromfile(path, dtype="<u2").astype(np.int64)
    if ids.size == 0:
        raise SystemExit("train: %s is empty" % path)
    return torch.from_numpy(ids)


def validation_loss(model, ids, bos_id, seq_len, batch=16):
    """Mean per-token cross-entropy (nats) over the whole held-out stream.

    The held-out token stream (valid.txt encoded as one string, no special
    tokens) is cut into consecutive non-overlapping pieces of seq_len-1 tokens;
    the last piece is whatever remains (shorter, never dropped, never padded).
    Each piece p is run as its own sequence [BOS] + p (at most seq_len
    positions, fresh context, positions from 0); the logits at position j
    score p[j]. Every held-out token is scored exactly once, the first token of
    a piece from BOS alone. Result = sum of -log p(token) / number of tokens.
    Computed in float32 (no autocast).
    """
    piece = seq_len - 1
    starts = list(range(0, ids.numel(), piece))
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for i in range(0, len(starts), batch):
            group = [ids[s:s + piece] for s in starts[i:i + batch]]
            # Full pieces batch together; the one short last piece runs alone.
            for same in ([g for g in group if g.numel() == piece], [g for g in group if g.numel() != piece]):
                if not same:
                    continue
                p = torch.stack(same)
                x = torch.cat([torch.full((p.shape[0], 1), bos_id, dtype=torch.long), p[:, :-1]], dim=1)
                logits = model(x)
                total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), p.reshape(-1),
                                         reduction="sum").item()
                count += p.numel()
    model.train()
    return total / count, count


def node_tokenize(cmd, tokenizer, payload):
    proc = subprocess.run(["node", os.path.join(HERE, "tokenize.js"), cmd, tokenizer],
                          input=json.dumps(payload).encode(), stdout=subprocess.PIPE, check=True)
    return json.loads(proc.stdout)


def generate(model, prompt_ids, max_new_tokens, temperature=None, top_p=None, generator=None):
    """Greedy when temperature is None; else temperature then top-p (Transformers' order)."""
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    model.eval()
    with torch.no_grad():
        for _ in range(max_new_tokens):
            logits = model(ids[:, -model.cfg["max_position_embeddings"]:])[0, -1]
            if temperature is None:
                nxt = int(logits.argmax())
            else:
                logits = logits / temperature
                sorted_logits, order = torch.sort(logits, descending=False)
                cum = sorted_logits.softmax(-1).cumsum(-1)
                remove = cum <= (1 - top_p)
                remove[-1] = False
                logits[order[remove]] = float("-inf")
                nxt = int(torch.multinomial(logits.softmax(-1), 1, generator=generator))
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    model.train()
    return ids[0].tolist()


def special_ids(tokenizer_path):
    with open(tokenizer_path) as f:
        tok = json.load(f)
    ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
    vocab = len(tok["model"]["vocab"]) + len(tok["added_tokens"])
    return ids, vocab, tok["added_tokens"]


def write_hf_files(out, model, cfg, tokenizer_path, added_tokens, gen_cfg, dtype):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump(gen_cfg, f, indent=2)
        f.write("\n")
    shutil.copyfile(tokenizer_path, os.path.join(out, "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["max_position_embeddings"],
        "model_input_names": ["input_ids", "attention_mask"],
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(t["id"]): {k: t[k] for k in ("content", "lstrip", "normalized", "rstrip", "single_word", "special")}
            for t in added_tokens},
    }
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tok_cfg, f, indent=2)
        f.write("\n")
    tensors = {k: v.to(dtype) for k, v in model.state_dict_hf().items()}
    safetensors_io.save_file(tensors, os.path.join(out, "model.safetensors"), {"format": "pt"})


def main():
    ap = argparse.ArgumentParser(description="Train loom's default Llama model.")
    ap.add_argument("--work", required=True, help="dir with train.bin, valid.bin, tokenizer.json")
    ap.add_argument("--out", required=True, help="output model directory (Hugging Face layout)")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3, help="peak learning rate")
    ap.add_argument("--min-lr-ratio", type=float, default=0.1, help="cosine floor as a fraction of --lr")
    ap.add_argument("--warmup", type=int, default=60, help="linear warmup steps")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--layers", type=int, default=5)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--max-positions", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: see README - on a shared 2-core machine two OpenMP threads run 3x slower)")
    ap.add_argument("--no-bf16", action="store_true",
                    help="train in float32 (default: bf16 autocast for matmuls, float32 master weights)")
    ap.add_argument("--save-dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps (0: only at the end)")
    ap.add_argument("--sample-tokens", type=int, default=48, help="new tokens per card sample (0: no samples)")
    ap.add_argument("--command", default=None, help="command line recorded in the model card")
    args = ap.parse_args()

    t_start = time.time()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    tok_path = os.path.join(args.work, "tokenizer.json")
    specials, vocab, added = special_ids(tok_path)
    bos_id, eos_id = specials[BOS], specials[EOS]
    train_ids = load_ids(os.path.join(args.work, "train.bin"))
    valid_ids = load_ids(os.path.join(args.work, "valid.bin"))
    if train_ids.numel() <= args.seq_len:
        raise SystemExit("train: train.bin has %d tokens, need more than --seq-len %d" % (train_ids.numel(), args.seq_len))
    if int(train_ids.max()) >= vocab or int(valid_ids.max()) >= vocab:
        raise SystemExit("train: token ids exceed the tokenizer's vocab %d" % vocab)

    cfg = llama_config(vocab, bos_id, eos_id, hidden_size=args.hidden, intermediate_size=args.intermediate,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       num_key_value_heads=args.kv_heads, max_position_embeddings=args.max_positions,
                       torch_dtype=args.save_dtype)
    model = LlamaForCausalLM(cfg)
    gen = torch.Generator().manual_seed(args.seed)
    model.init_weights(gen)
    n_params = model.num_parameters()

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(step):  # step is 0-based
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        frac = (step - args.warmup) / max(1, args.steps - args.warmup)
        floor = args.lr * args.min_lr_ratio
        return floor + (args.lr - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))

    os.makedirs(args.out, exist_ok=True)
    log_path = os.path.join(args.work, "train.log")
    fh = open(log_path, "w")
    use_bf16 = not args.no_bf16
    log("model: %d params (%s), vocab %d, bos %d eos %d; train %d tokens, valid %d tokens; bf16 autocast %s"
        % (n_params, json.dumps({k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                                     "num_attention_heads", "num_key_value_heads")}),
           vocab, bos_id, eos_id, train_ids.numel(), valid_ids.numel(), use_bf16), fh)
    log("plan: %d steps x %d seqs x %d tokens = %d tokens (%.2f epochs)"
        % (args.steps, args.batch, args.seq_len, args.steps * args.batch * args.seq_len,
           args.steps * args.batch * args.seq_len / train_ids.numel()), fh)

    history = []
    first_losses = []
    window_loss, window_n = 0.0, 0
    t_train = time.time()
    cpu_train0 = cpu_seconds()
    max_start = train_ids.numel() - args.seq_len
    for step in range(args.steps):
        starts = torch.randint(0, max_start + 1, (args.batch,), generator=gen)
        tgt = torch.stack([train_ids[s:s + args.seq_len] for s in starts.tolist()])
        x = torch.cat([torch.full((args.batch, 1), bos_id, dtype=torch.long), tgt[:, :-1]], dim=1)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_bf16):
            logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, vocab), tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        if not math.isfinite(lv):
            raise SystemExit("train: loss became %s at step %d" % (lv, step + 1))
        if len(first_losses) < 5:
            first_losses.append(lv)
        window_loss += lv
        window_n += 1
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            el = time.time() - t_train
            rate = done / el
            entry = {"step": done, "train_loss": window_loss / window_n, "lr": lr_at(step), "elapsed_s": round(el, 1)}
            msg = "step %d/%d  loss %.4f  lr %.2e  %.2f steps/s  %.0f tok/s  elapsed %.0fs  cpu %.0fs  eta %.0fs" % (
                done, args.steps, entry["train_loss"], entry["lr"], rate, rate * args.batch * args.seq_len,
                el, cpu_seconds() - cpu_train0, (args.steps - done) / rate)
            if args.eval_every and done % args.eval_every == 0 and done != args.steps:
                entry["valid_loss"], _ = validation_loss(model, valid_ids, bos_id, args.seq_len)
                msg += "  valid %.4f" % entry["valid_loss"]
            history.append(entry)
            log(msg, fh)
            window_loss, window_n = 0.0, 0
    train_seconds = time.time() - t_train
    train_cpu_seconds = cpu_seconds() - cpu_train0

    t_eval = time.time()
    valid_loss, valid_tokens = validation_loss(model, valid_ids, bos_id, args.seq_len)
    # Train loss of the final weights, measured like the validation loss (float32,
    # same chunking) on the first len(valid) tokens of train.bin, so the two
    # figures are comparable.
    train_eval_loss, _ = validation_loss(model, train_ids[:valid_ids.numel()], bos_id, args.seq_len)
    eval_seconds = time.time() - t_eval
    log("final: valid loss %.4f (ppl %.2f) over %d tokens; train loss (same procedure, first %d train tokens) %.4f"
        % (valid_loss, math.exp(valid_loss), valid_tokens, valid_ids.numel(), train_eval_loss), fh)

    gen_cfg = {"bos_token_id": bos_id, "eos_token_id": [eos_id, specials[CHAT_END]], "pad_token_id": eos_id,
               "do_sample": True, "temperature": 0.8, "top_p": 0.95, "top_k": 0, "max_new_tokens": 64}
    dtype = torch.float32 if args.save_dtype == "float32" else torch.bfloat16
    write_hf_files(args.out, model, cfg, tok_path, added, gen_cfg, dtype)

    samples = []
    if args.sample_tokens > 0:
        prompt_ids = node_tokenize("encode-json", tok_path, PROMPTS)
        sample_gen = torch.Generator().manual_seed(args.seed)
        outs = []
        for ids in prompt_ids:
            outs.append(generate(model, ids, args.sample_tokens))
            outs.append(generate(model, ids, args.sample_tokens, temperature=gen_cfg["temperature"],
                                 top_p=gen_cfg["top_p"], generator=sample_gen))
        texts = node_tokenize("decode-json", tok_path, [o[1:] for o in outs])  # drop BOS
        for i, prompt in enumerate(PROMPTS):
            samples.append({"prompt": prompt, "prompt_ids": prompt_ids[i],
                            "greedy": texts[2 * i], "greedy_ids": outs[2 * i],
                            "sampled": texts[2 * i + 1]})
            log("sample %r\n  greedy : %r\n  sampled: %r" % (prompt, texts[2 * i], texts[2 * i + 1]), fh)

    result = {
        "command": args.command or " ".join(sys.argv),
        "args": vars(args),
        "params": n_params,
        "config": cfg,
        "generation_config": gen_cfg,
        "special_tokens": specials,
        "vocab_size": vocab,
        "train_tokens": train_ids.numel(),
        "valid_tokens": valid_ids.numel(),
        "tokens_seen": args.steps * args.batch * args.seq_len,
        "first_losses": first_losses,
        "final_train_loss": history[-1]["train_loss"] if history else None,
        "final_train_eval_loss": train_eval_loss,
        "valid_loss": valid_loss,
        "history": history,
        "train_seconds": round(train_seconds, 1),
        "train_cpu_seconds": round(train_cpu_seconds, 1),
        "eval_seconds": round(eval_seconds, 1),
        "cpu_seconds": round(cpu_seconds(), 1),
        "threads": args.threads,
        "total_seconds": round(time.time() - t_start, 1),
        "torch": torch.__version__,
        "cpu": platform.processor() or platform.machine(),
        "samples": samples,
        "save_dtype": args.save_dtype,
    }
    with open(os.path.join(args.work, "train_result.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    write_card.write_card(args.out, result, os.path.join(args.work, "corpus.json"))
    log("wrote %s (%.1f MB safetensors) in %.0fs total" % (
        args.out, os.path.getsize(os.path.join(args.out, "model.safetensors")) / 1e6, time.time() - t_start), fh)
    fh.close()


if __name__ == "__main__":
    main()
