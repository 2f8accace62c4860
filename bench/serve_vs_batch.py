#!/usr/bin/env python3
"""The server's cost over the engine: the same requests through `loom serve` (driven
by serve_bench at a concurrency) and through `loom batch` (as many sequences at once),
output tok/s of each and their ratio, measured back to back; then TTFT with and
without a shared system prompt (prefix cache). Random token-id prompts, greedy.

  bench/serve_vs_batch.py --model DIR [--requests 64] [--concurrency 16 32] [--prompt-len 128 512]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_prompts(path, n, vocab, lo, hi, new_tokens, shared_prefix, seed):
    rng = random.Random(seed)
    prefix = [rng.randrange(3, vocab) for _ in range(shared_prefix)]
    with open(path, "w") as f:
        for i in range(n):
            ids = prefix + [rng.randrange(3, vocab) for _ in range(rng.randint(lo, hi))]
            f.write(json.dumps({"id": f"r{i}", "prompt_ids": ids, "max_new_tokens": new_tokens, "temperature": 0}) + "\n")


def start_server(loom, model, extra):
    p = subprocess.Popen([loom, "serve", "--model", model, "--port", "0", "--no-request-log", *extra],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    port = None
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready on" in line:
            break
        if p.poll() is not None:
            sys.exit("loom serve failed to start")
    return p, port


def serve_run(args, prompts, concurrency, stream=True):
    server, port = start_server(args.loom, args.model, args.serve_args)
    try:
        out = subprocess.run([args.serve_bench, "--url", f"http://127.0.0.1:{port}", "-i", prompts, "-n", str(args.requests),
                              "-c", str(concurrency), "--json", *([] if stream else ["--no-stream"])],
                             capture_output=True, text=True, check=True)
        return json.loads(out.stdout)
    finally:
        server.terminate()
        server.wait(60)


def batch_run(args, prompts, concurrency):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        p = subprocess.run([args.loom, "batch", "--model", args.model, "-i", prompts, "-o", out.name, "--no-progress",
                            "--max-requests-per-batch", str(concurrency), *args.serve_args],
                           capture_output=True, text=True, check=True)
    m = re.search(r"([\d.]+) generated tok/s", p.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 32])
    ap.add_argument("--prompt-len", type=int, nargs=2, default=[128, 512])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--system-prompt", type=int, default=256, help="shared prefix tokens of the TTFT comparison")
    ap.add_argument("--plain", action="store_true", help="also run the requests unstreamed")
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--serve-bench", default=os.path.join(ROOT, "build", "bench", "serve_bench"))
    ap.add_argument("serve_args", nargs="*", help="extra flags for both loom serve and loom batch (after --)")
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    with tempfile.TemporaryDirectory() as d:
        plain = os.path.join(d, "plain.jsonl")
        shared = os.path.join(d, "shared.jsonl")
        lo, hi = args.prompt_len
        make_prompts(plain, args.requests, vocab, lo, hi, args.new_tokens, 0, 1)
        make_prompts(shared, args.requests, vocab, max(1, lo - args.system_prompt), max(1, hi - args.system_prompt),
                     args.new_tokens, args.system_prompt, 2)
        print(f"{args.requests} requests, prompts {lo}-{hi} tokens, {args.new_tokens} new tokens each, greedy; model {args.model}")
        print("serve: streamed requests (serve_bench); plain: the same without streaming; batch: loom batch;")
        print("client CPU: serve_bench's own CPU seconds on the same cores")
        print(f"{'concurrency':>11} {'serve tok/s':>12} {'plain tok/s':>12} {'batch tok/s':>12} {'serve/batch':>12} "
              f"{'plain/batch':>12} {'client CPU s':>12} {'TTFT p50 ms':>12} {'TTFT p99 ms':>12}")
        for c in args.concurrency:
            s = serve_run(args, plain, c)
            b = batch_run(args, plain, c)
            p = serve_run(args, plain, c, stream=False) if args.plain else None
            pt = p["output_tokens_per_second"] if p else float("nan")
            print(f"{c:>11} {s['output_tokens_per_second']:>12.1f} {pt:>12.1f} {b:>12.1f} "
                  f"{s['output_tokens_per_second'] / b:>12.3f} {pt / b:>12.3f} {s['client_cpu_seconds']:>12.2f} "
                  f"{s['ttft_p50_ms']:>12.0f} {s['ttft_p99_ms']:>12.0f}", flush=True)
        c = args.concurrency[0]
        s = serve_run(args, shared, c)
        print(f"shared {args.system_prompt}-token system prompt, concurrency {c}: TTFT p50 {s['ttft_p50_ms']:.0f} ms, "
              f"p99 {s['ttft_p99_ms']:.0f} ms; output {s['output_tokens_per_second']:.1f} tok/s")


if __name__ == "__main__":
    main()
