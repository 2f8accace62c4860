#!/usr/bin/env python3
"""loom next to llama.cpp on the same GGUF files, measured alternately in one run:
decode at batch 1 (128 tokens after a 512-token prompt), prefill of 512 tokens, and
32-sequence decode (128-token prompts, 128 decode steps), tok/s of each and loom's ratio.

loom's figures come from `loom bench` (batch 1), `build/bench/batching_bench`'s
BM_DecodeAtBatch (32-sequence decode without the prefill) and `loom batch` (the same 32
requests end to end, prefill included). llama.cpp's come from a small driver over llama.h
(pp512 / tg128 / batched-bench-like decode), built outside this repository; its path is an
argument. Random prompt ids; the best of --repeats runs is kept on both sides.

  /usr/bin/python3 bench/gguf_vs_llama_cpp.py --baseline /tmp/llamacpp/build/llama_baseline_bench \\
      --threads 2 --repeats 3 /tmp/llama1b-bf16.gguf [more.gguf ...]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT, DECODE, SEQS, SEQ_PROMPT, SEQ_GEN = 512, 128, 32, 128, 128


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def loom_batch1(args, model):
    out = run([args.loom, "bench", "--model", model, "--threads", str(args.threads), "--repeats", str(args.repeats),
               "--prompt-tokens", str(PROMPT), "--decode-tokens", str(DECODE), "--no-bounds"]).stdout
    rows = [l for l in out.splitlines() if l.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    values = [c.strip() for c in rows[2].strip("|").split("|")]
    row = dict(zip(header, values))
    return float(row[f"decode tok/s ({DECODE})"]), float(row[f"prefill tok/s ({PROMPT})"])


def loom_decode_at_batch(args, model):
    env = dict(os.environ, LOOM_NUM_THREADS=str(args.threads), LOOM_BENCH_MODEL=model,
               LOOM_BENCH_CONCURRENT=str(SEQS), LOOM_BENCH_PROMPT_MIN=str(SEQ_PROMPT),
               LOOM_BENCH_DECODE_STEPS=str(SEQ_GEN))
    out = run([args.batching_bench, "--benchmark_filter=BM_DecodeAtBatch", "--benchmark_format=json",
               f"--benchmark_repetitions={args.repeats}"], env=env).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    return max(b["gen_tok_per_s"] for b in runs)


def loom_batch_end_to_end(args, model, prompts):
    best, generated = 0.0, 0
    for _ in range(args.repeats):
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
            err = run([args.loom, "batch", "--model", model, "-i", prompts, "-o", out.name, "--no-progress",
                       "--threads", str(args.threads), "--max-requests-per-batch", str(SEQS)]).stderr
        m = re.search(r"(\d+) generated tokens in [\d.]+ s · ([\d.]+) generated tok/s", err)
        if not m:
            sys.exit(f"cannot read loom batch's summary:\n{err[-1000:]}")
        generated = int(m.group(1))
        best = max(best, float(m.group(2)))
    return best, generated


def baseline(args, model):
    out = run([args.baseline, "--model", model, "--threads", str(args.threads), "--repeats", str(args.repeats),
               "--tg-prompt", str(PROMPT), "--seqs", str(SEQS)]).stdout
    figures = dict(l.split() for l in out.splitlines() if len(l.split()) == 2)
    return (float(figures[f"tg{DECODE}"]), float(figures[f"pp{PROMPT}"]), float(figures[f"batched{SEQS}"]),
            float(figures[f"batched{SEQS}_end_to_end"]))


def write_prompts(path, seed):
    # Ids below 256 exist in every vocabulary; the weights are what is measured, not the text.
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(SEQS):
            ids = [rng.randrange(3, 256) for _ in range(SEQ_PROMPT)]
            f.write(json.dumps({"id": f"r{i}", "prompt_ids": ids, "max_new_tokens": SEQ_GEN, "temperature": 0}) + "\n")


def ratio(a, b):
    return f"{a / b:.2f}x" if b > 0 else "n/a"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf", nargs="+", help="GGUF files, each run by both engines")
    ap.add_argument("--baseline", required=True, help="the llama.cpp driver (llama_baseline_bench), built outside the repo")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--batching-bench", default=os.path.join(ROOT, "build", "bench", "batching_bench"))
    args = ap.parse_args()
    for path in [args.baseline, args.loom, args.batching_bench, *args.gguf]:
        if not os.path.exists(path):
            sys.exit(f"not found: {path}")
    print(f"{cpu_name()}, {args.threads} threads, best of {args.repeats}; loom and llama.cpp alternate per file")
    print(f"decode b1: {DECODE} tokens after a {PROMPT}-token prompt; pp{PROMPT}: prefill; "
          f"{SEQS}-seq: {SEQS} × ({SEQ_PROMPT}-token prompt + {SEQ_GEN} decode steps), decode-only tok/s; "
          f"e2e: the same with the prefill, generated tok/s (loom batch)")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        prompts = os.path.join(d, "prompts.jsonl")
        write_prompts(prompts, 1)
        for model in args.gguf:
            l_tg, l_pp = loom_batch1(args, model)
            b_tg, b_pp, b_seq, b_e2e = baseline(args, model)
            l_seq = loom_decode_at_batch(args, model)
            l_e2e, generated = loom_batch_end_to_end(args, model, prompts)
            note = "" if generated == SEQS * SEQ_GEN else f" (loom batch generated {generated}: EOS came early)"
            rows.append((os.path.basename(model) + note, l_tg, b_tg, l_pp, b_pp, l_seq, b_seq, l_e2e, b_e2e))
    print()
    print(f"| file | decode b1 loom | llama.cpp | ratio | pp{PROMPT} loom | llama.cpp | ratio | "
          f"{SEQS}-seq decode loom | llama.cpp | ratio | {SEQS}-seq e2e loom | llama.cpp | ratio |")
    print("|---|" + "---:|" * 12)
    for name, l_tg, b_tg, l_pp, b_pp, l_seq, b_seq, l_e2e, b_e2e in rows:
        print(f"| {name} | {l_tg:.2f} | {b_tg:.2f} | {ratio(l_tg, b_tg)} | {l_pp:.1f} | {b_pp:.1f} | {ratio(l_pp, b_pp)} | "
              f"{l_seq:.1f} | {b_seq:.1f} | {ratio(l_seq, b_seq)} | {l_e2e:.1f} | {b_e2e:.1f} | {ratio(l_e2e, b_e2e)} |")


if __name__ == "__main__":
    main()
