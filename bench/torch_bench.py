#!/usr/bin/python3
"""PyTorch eager baseline for loom's speed: runs tests/reference/reference_model.py on a
checkpoint (e.g. one written by bench/make_llama_1b.py) and prints prefill and decode tok/s.

  nice -n 5 /usr/bin/python3 bench/torch_bench.py --model /work/bench-models/llama-1b-bf16

Batch 1, a random prompt of --prompt-len tokens (prefill: one forward over the prompt, logits of
the last position only, as generate() does), then --decode greedy tokens one at a time with a
KV cache. --compute picks the compute dtype(s); "auto" is the checkpoint's dtype, i.e. what
PyTorch eager does with a model loaded in its own dtype (bf16: matmuls in bf16, RMSNorm
statistics, RoPE tables and softmax in f32, as Transformers' eager path).
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import reference_model  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def run(model, prompt, n_decode):
    cache = model.new_cache(len(prompt) + n_decode)
    t0 = time.perf_counter()
    logits = model.forward_cached(cache, prompt)[-1]
    t1 = time.perf_counter()
    for _ in range(n_decode):
        logits = model.forward_cached(cache, [int(torch.argmax(logits))])[-1]
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/work/bench-models/llama-1b-bf16")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compute", default="auto", help="comma list of f32,bf16 or auto (checkpoint dtype)")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    with open(os.path.join(args.model, "config.json")) as f:
        ckpt_dtype = {"float32": "f32", "bfloat16": "bf16"}.get(json.load(f).get("torch_dtype"), "f32")
    computes = [ckpt_dtype] if args.compute == "auto" else args.compute.split(",")

    rows = []
    for name in computes:
        t = time.perf_counter()
        model = reference_model.Model(args.model, DTYPES[name])
        load_s = time.perf_counter() - t
        g = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, model.cfg.vocab_size, (args.prompt_len,), generator=g).tolist()
        run(model, prompt[:16], 4)  # warm-up: thread pool, allocator, oneDNN primitives
        load_before = os.getloadavg()[0]
        prefill_s, decode_s = run(model, prompt, args.decode)
        rows.append((name, load_s, prefill_s, decode_s, load_before, os.getloadavg()[0]))
        del model

    print(f"PyTorch {torch.__version__} eager, batch 1, {args.threads} threads, checkpoint "
          f"{os.path.basename(os.path.normpath(args.model))} ({ckpt_dtype})")
    print(f"| compute | load s | prefill {args.prompt_len} tok/s | decode {args.decode} tok/s | loadavg before/after |")
    print("|---|---|---|---|---|")
    for name, load_s, prefill_s, decode_s, la0, la1 in rows:
        print(f"| {name} | {load_s:.1f} | {args.prompt_len / prefill_s:.1f} | {args.decode / decode_s:.2f} "
              f"| {la0:.2f} / {la1:.2f} |")
    busiest = max(max(r[4], r[5]) for r in rows)
    if busiest > os.cpu_count():
        print(f"WARNING: load average {busiest:.1f} on {os.cpu_count()} cores: other processes shared the CPU, "
              "so these timings understate PyTorch's speed (OpenMP threads suffer most); rerun on an idle machine.")


if __name__ == "__main__":
    main()
