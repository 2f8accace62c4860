#!/usr/bin/python3
"""Per-step overhead of two loom binaries on the bundled model, alternating.

The bundled 4.5M-parameter model's weights fit in L3, so its decode speed is set by
what a step does besides the matmuls (planning, copying, sampling, waking threads).
Batch 1 comes from `loom bench` (decode tok/s after a short prompt); 32 sequences from
`loom batch` (generated tok/s, load time excluded), greedy and sampled as the model's
generation_config.json asks (top-p over the whole vocabulary), each request seeded. Each cell is
the best of --rounds runs; the binaries take turns within each round, since this
machine's speed changes from minute to minute.

    /usr/bin/python3 bench/step_overhead.py --old /work/old/loom --new build/loom
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def batch1(binary, threads, decode_tokens):
    out = subprocess.run([binary, "bench", "--threads", str(threads), "--prompt-tokens", "16",
                          "--decode-tokens", str(decode_tokens), "--repeats", "3", "--no-bounds"],
                         check=True, capture_output=True, text=True).stdout
    header, row = None, None
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None and any(c.startswith("decode tok/s") for c in cells):
            header = cells
        elif header is not None and len(cells) == len(header) and not cells[0].startswith("---"):
            row = cells
            break
    if row is None:
        sys.exit(f"no decode figure in the output of {binary} bench:\n{out}")
    column = next(i for i, c in enumerate(header) if c.startswith("decode tok/s"))
    return float(row[column])


def batch32(binary, threads, new_tokens, prompts):
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "out.jsonl")
        proc = subprocess.run([binary, "batch", "--input", prompts, "--output", results, "--threads", str(threads),
                               "--no-progress"], check=True, capture_output=True, text=True)
    m = re.search(r"([0-9.]+) generated tok/s", proc.stderr)
    if not m:
        sys.exit(f"no throughput in the output of {binary} batch:\n{proc.stderr}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", required=True, help="the baseline loom binary")
    ap.add_argument("--new", required=True, help="the loom binary measured against it")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds; each cell is the best (default 3)")
    ap.add_argument("--decode-tokens", type=int, default=256, help="batch-1 decode tokens per run (default 256)")
    ap.add_argument("--sequences", type=int, default=32, help="sequences in the batched case (default 32)")
    ap.add_argument("--new-tokens", type=int, default=128, help="tokens each batched sequence generates (default 128)")
    args = ap.parse_args()
    for b in (args.old, args.new):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable loom binary")

    prompts = {}
    for mode in ("greedy", "sampled"):
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            for i in range(args.sequences):
                line = {"id": str(i), "prompt_ids": [1] + [(97 * i + 31 * k) % 500 + 3 for k in range(7)],
                        "max_new_tokens": args.new_tokens}
                line.update({"temperature": 0} if mode == "greedy" else {"seed": i})
                f.write(json.dumps(line) + "\n")
            prompts[mode] = f.name
    cases = ["batch 1", f"{args.sequences} sequences, greedy", f"{args.sequences} sequences, sampled"]
    try:
        rows = []
        for threads in [int(t) for t in args.threads.split(",")]:
            for case in cases:
                best = {"old": 0.0, "new": 0.0}
                for r in range(args.rounds):
                    order = ("old", "new") if r % 2 == 0 else ("new", "old")
                    for which in order:
                        binary = args.old if which == "old" else args.new
                        tps = (batch1(binary, threads, args.decode_tokens) if case == "batch 1"
                               else batch32(binary, threads, args.new_tokens, prompts[case.split(", ")[1]]))
                        best[which] = max(best[which], tps)
                rows.append((case, threads, best["old"], best["new"]))
                print(f"{case}, {threads} thread(s): old {best['old']:.1f}, new {best['new']:.1f} tok/s",
                      file=sys.stderr)
    finally:
        for path in prompts.values():
            os.unlink(path)

    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"CPU: {cpu}, {os.cpu_count()} cores; best of {args.rounds} alternating rounds\n")
    print("| case | threads | old tok/s | new tok/s | new / old |")
    print("|---|---:|---:|---:|---:|")
    for case, threads, old, new in rows:
        print(f"| {case} | {threads} | {old:.1f} | {new:.1f} | {new / old:.2f}x |")


if __name__ == "__main__":
    main()
