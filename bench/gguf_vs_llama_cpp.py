#!/usr/bin/env python3
"""loom next to llama.cpp on the same GGUF files, measured alternately in one run:
decode at batch 1 (128 tokens, from an empty context and after 512 tokens), prefill of 512
tokens, and 32-sequence decode (128-token prompts, 128 decode steps), tok/s of each and
loom's ratio.

loom's figures come from `loom bench` (batch 1: 128 decode tokens after a 1-token prompt,
and after a 512-token prompt, whose prefill is the pp512 figure),
`build/bench/batching_bench`'s BM_DecodeAtBatch (32-sequence decode without the prefill)
and `loom batch` (the same 32 requests end to end, prefill included). llama.cpp's come from
its own upstream tools, built outside this repository (their folder is an argument):
`llama-bench -p 512 -n 128 -o json` (pp512, and tg128, which starts from an empty context),
`llama-bench -p 0 -n 128 -d 512` (tg128 after 512 tokens in the cache) and
`llama-batched-bench -npp 128 -ntg 128 -npl 32` (S_TG is the 32-sequence decode; the
end-to-end figure is its 32·128 generated tokens over T_PP + T_TG). Both engines decode at
the same depths, so each reads the same amount of KV cache (each in its default cache
type: loom f32, llama.cpp f16). Load: wall time and
peak RSS of loading the file and generating one token (`loom generate -n 1` against
`llama-bench -p 4 -n 1 -r 1`, under /usr/bin/time), the least of the repeats. loom's caches
(the packed or interleaved weights it maps on later loads) go to a fresh folder unless
--cache-dir says otherwise: each file's first load, which writes them, is timed on its own
and then waited for (sync), so the writing back of those pages does not run under the
measurements that follow. Each repeat runs loom then llama.cpp for every measurement, so
both see the same machine state; the best of --repeats is kept on both sides. Random prompt
ids on both sides. Batch-1 decode from an empty context is also put against the read bound
`loom bench` measures around its runs (weight bytes per token over a plain read of those
weights on the same threads, just before and after each run), the highest of them: the share
of it each engine reaches says how far either can go on this machine.

Batch-1 decode from an empty context reads memory and little else, and the VMs this runs on
change memory speed every few seconds (30 and 57 GB/s in turn, a neighbour's traffic), while
a 128-token run takes 3-4 s. So it is also measured in --b1-pairs short runs of each engine,
alternating, and each side keeps its best: with enough pairs both catch the fast state.

  /usr/bin/python3 bench/gguf_vs_llama_cpp.py --llama-cpp-bin /tmp/llamacpp-src/build/bin \\
      --threads 2 --repeats 3 /tmp/llama1b-q8_0.gguf [more.gguf ...]
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


def run(cmd, env=None, retries=0):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode < 0 and retries > 0:
        # llama.cpp's AMX path (a -march=native build on an AMX CPU) died now and then
        # with SIGILL in pp512 on our VMs; a rerun goes through. Said on stderr.
        print(f"note: {os.path.basename(cmd[0])} died of signal {-p.returncode}; running it again", file=sys.stderr)
        return run(cmd, env, retries - 1)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr[-2000:]}")
    return p


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def loom_bench_table(args, model, prompt, bounds):
    cmd = [args.loom, "bench", "--model", model, "--threads", str(args.threads), "--repeats", "1",
           "--prompt-tokens", str(prompt), "--decode-tokens", str(DECODE)]
    out = run(cmd if bounds else cmd + ["--no-bounds"]).stdout
    rows = [l for l in out.splitlines() if l.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    values = [c.strip() for c in rows[2].strip("|").split("|")]
    return dict(zip(header, values)), rows


def loom_batch1(args, model):
    """Decode tok/s after a PROMPT-token prompt, that prefill's tok/s, and the decode read bound
    (tok/s) measured around its decode run."""
    row, rows = loom_bench_table(args, model, PROMPT, bounds=True)
    bound = [l for l in rows if l.startswith("| decode |")]
    if not bound:
        sys.exit(f"loom bench printed no decode bound:\n{rows}")
    bound_tok_s = float(bound[0].strip("|").split("|")[2])
    return float(row[f"decode tok/s ({DECODE})"]), float(row[f"prefill tok/s ({PROMPT})"]), bound_tok_s


def loom_decode_from_empty(args, model):
    """Decode tok/s of DECODE tokens after a 1-token prompt (the depth llama-bench's tg starts at),
    and the read bound (tok/s) measured around that run."""
    row, rows = loom_bench_table(args, model, 1, bounds=True)
    bound = [l for l in rows if l.startswith("| decode |")]
    if not bound:
        sys.exit(f"loom bench printed no decode bound:\n{rows}")
    return float(row[f"decode tok/s ({DECODE})"]), float(bound[0].strip("|").split("|")[2])


def loom_decode_at_batch(args, model):
    env = dict(os.environ, LOOM_NUM_THREADS=str(args.threads), LOOM_BENCH_MODEL=model,
               LOOM_BENCH_CONCURRENT=str(SEQS), LOOM_BENCH_PROMPT_MIN=str(SEQ_PROMPT),
               LOOM_BENCH_DECODE_STEPS=str(SEQ_GEN))
    out = run([args.batching_bench, "--benchmark_filter=BM_DecodeAtBatch", "--benchmark_format=json",
               "--benchmark_repetitions=1"], env=env).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    return max(b["gen_tok_per_s"] for b in runs)


def loom_batch_end_to_end(args, model, prompts):
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        err = run([args.loom, "batch", "--model", model, "-i", prompts, "-o", out.name, "--no-progress",
                   "--threads", str(args.threads), "--max-requests-per-batch", str(SEQS)]).stderr
    m = re.search(r"(\d+) generated tokens in [\d.]+ s · ([\d.]+) generated tok/s", err)
    if not m:
        sys.exit(f"cannot read loom batch's summary:\n{err[-1000:]}")
    return float(m.group(2)), int(m.group(1))


def llama_bench(args, model):
    """tg128 from an empty context and pp512."""
    out = run([os.path.join(args.llama_cpp_bin, "llama-bench"), "-m", model, "-t", str(args.threads),
               "-p", str(PROMPT), "-n", str(DECODE), "-r", "1", "-o", "json"], retries=2).stdout
    tests = json.loads(out)
    tg = [t["avg_ts"] for t in tests if t["n_prompt"] == 0 and t["n_gen"] == DECODE]
    pp = [t["avg_ts"] for t in tests if t["n_prompt"] == PROMPT and t["n_gen"] == 0]
    if not tg or not pp:
        sys.exit(f"llama-bench gave no tg{DECODE} / pp{PROMPT} result:\n{out[-1000:]}")
    return tg[0], pp[0]


def llama_bench_tg(args, model):
    """tg128 from an empty context alone."""
    out = run([os.path.join(args.llama_cpp_bin, "llama-bench"), "-m", model, "-t", str(args.threads),
               "-p", "0", "-n", str(DECODE), "-r", "1", "-o", "json"], retries=2).stdout
    tg = [t["avg_ts"] for t in json.loads(out) if t["n_prompt"] == 0 and t["n_gen"] == DECODE]
    if not tg:
        sys.exit(f"llama-bench gave no tg{DECODE} result:\n{out[-1000:]}")
    return tg[0]


def llama_bench_at_depth(args, model):
    """tg128 after PROMPT tokens in the cache (llama-bench -d)."""
    out = run([os.path.join(args.llama_cpp_bin, "llama-bench"), "-m", model, "-t", str(args.threads),
               "-p", "0", "-n", str(DECODE), "-d", str(PROMPT), "-r", "1", "-o", "json"], retries=2).stdout
    tg = [t["avg_ts"] for t in json.loads(out) if t["n_gen"] == DECODE and t.get("n_depth") == PROMPT]
    if not tg:
        sys.exit(f"llama-bench gave no tg{DECODE} @ d{PROMPT} result:\n{out[-1000:]}")
    return tg[0]


def llama_batched_bench(args, model):
    p = run([os.path.join(args.llama_cpp_bin, "llama-batched-bench"), "-m", model, "-t", str(args.threads),
             "-c", str(SEQS * (SEQ_PROMPT + SEQ_GEN)), "-npp", str(SEQ_PROMPT), "-ntg", str(SEQ_GEN),
             "-npl", str(SEQS), "--output-format", "jsonl"], retries=2)
    for line in (p.stdout + "\n" + p.stderr).splitlines():
        if line.startswith("{") and '"speed_tg"' in line:
            r = json.loads(line)
            return r["speed_tg"], SEQS * SEQ_GEN / r["t"]
    sys.exit(f"llama-batched-bench printed no result line:\n{p.stdout[-1000:]}\n{p.stderr[-1000:]}")


def timed(cmd):
    """Wall seconds and peak RSS (GB) of cmd, from /usr/bin/time."""
    p = run(["/usr/bin/time", "-f", "loom-timed %e %M", *cmd])
    line = [l for l in p.stderr.splitlines() if l.startswith("loom-timed ")][-1].split()
    return float(line[1]), int(line[2]) / 1e6


def load_one_token(args, model):
    loom = timed([args.loom, "generate", "--model", model, "--prompt-ids", "1,2,3,4", "-n", "1",
                  "--threads", str(args.threads)])
    llama = timed([os.path.join(args.llama_cpp_bin, "llama-bench"), "-m", model, "-t", str(args.threads),
                   "-p", "4", "-n", "1", "-r", "1"])
    return loom, llama


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
    ap.add_argument("--llama-cpp-bin", required=True,
                    help="folder with llama.cpp's llama-bench and llama-batched-bench, built outside the repo")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--b1-pairs", type=int, default=4,
                    help="extra alternating batch-1 runs per engine (tg128 from an empty context), best kept")
    ap.add_argument("--skip-batched", action="store_true", help="only batch 1 and prefill (quicker)")
    ap.add_argument("--cache-dir", help="loom's LOOM_CACHE_DIR (default: a fresh folder, so first loads are first)")
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--batching-bench", default=os.path.join(ROOT, "build", "bench", "batching_bench"))
    args = ap.parse_args()
    tools = [os.path.join(args.llama_cpp_bin, t) for t in ("llama-bench", "llama-batched-bench")]
    for path in [*tools, args.loom, args.batching_bench, *args.gguf]:
        if not os.path.exists(path):
            sys.exit(f"not found: {path}")
    print(f"{cpu_name()}, {args.threads} threads, best of {args.repeats} (batch 1 from an empty context: of "
          f"{args.repeats + args.b1_pairs}); loom and llama.cpp alternate per measurement")
    print(f"decode b1: {DECODE} tokens from an empty context (llama-bench tg{DECODE}), @{PROMPT}: after {PROMPT} "
          f"tokens (llama-bench -d {PROMPT}); pp{PROMPT}: "
          f"prefill; {SEQS}-seq: {SEQS} × ({SEQ_PROMPT}-token prompt + {SEQ_GEN} decode steps), decode-only tok/s; "
          f"e2e: the same with the prefill, generated tok/s (loom batch, llama-batched-bench)")
    rows, loads, bounds = [], [], []
    with tempfile.TemporaryDirectory() as d:
        os.environ["LOOM_CACHE_DIR"] = args.cache_dir or os.path.join(d, "loom-cache")
        prompts = os.path.join(d, "prompts.jsonl")
        write_prompts(prompts, 1)
        for model in args.gguf:
            best = [0.0] * 8  # loom tg, llama tg, loom pp, llama pp, loom seq, llama seq, loom e2e, llama e2e
            deep = [0.0, 0.0]  # decode after PROMPT tokens: loom, llama.cpp
            first_load = timed([args.loom, "generate", "--model", model, "--prompt-ids", "1,2,3,4", "-n", "1",
                                "--threads", str(args.threads)])[0]
            os.sync()
            load = [(1e9, 0.0), (1e9, 0.0)]  # (seconds, peak RSS GB): loom, llama.cpp
            bound = 0.0
            generated = SEQS * SEQ_GEN
            for _ in range(args.repeats):
                for side, got in enumerate(load_one_token(args, model)):
                    load[side] = (min(load[side][0], got[0]), max(load[side][1], got[1]))
                l_deep, l_pp, l_bound = loom_batch1(args, model)
                bound = max(bound, l_bound)
                b_tg, b_pp = llama_bench(args, model)
                l_tg, l_bound = loom_decode_from_empty(args, model)
                bound = max(bound, l_bound)
                b_deep = llama_bench_at_depth(args, model)
                deep = [max(deep[0], l_deep), max(deep[1], b_deep)]
                got = [l_tg, b_tg, l_pp, b_pp]
                if not args.skip_batched:
                    l_seq = loom_decode_at_batch(args, model)
                    l_e2e, generated = loom_batch_end_to_end(args, model, prompts)
                    b_seq, b_e2e = llama_batched_bench(args, model)
                    got += [l_seq, b_seq, l_e2e, b_e2e]
                else:
                    got += [0.0] * 4
                best = [max(a, b) for a, b in zip(best, got)]
            for _ in range(args.b1_pairs):
                l_tg, l_bound = loom_decode_from_empty(args, model)
                bound = max(bound, l_bound)
                best[0] = max(best[0], l_tg)
                best[1] = max(best[1], llama_bench_tg(args, model))
            note = "" if generated == SEQS * SEQ_GEN else f" (loom batch generated {generated}: EOS came early)"
            rows.append((os.path.basename(model) + note, *best))
            loads.append((os.path.basename(model), first_load, load))
            bounds.append((os.path.basename(model), *deep, bound, best[0], best[1]))
    print()
    print(f"| file | decode b1 loom | llama.cpp | ratio | pp{PROMPT} loom | llama.cpp | ratio | "
          f"{SEQS}-seq decode loom | llama.cpp | ratio | {SEQS}-seq e2e loom | llama.cpp | ratio |")
    print("|---|" + "---:|" * 12)
    for name, l_tg, b_tg, l_pp, b_pp, l_seq, b_seq, l_e2e, b_e2e in rows:
        print(f"| {name} | {l_tg:.2f} | {b_tg:.2f} | {ratio(l_tg, b_tg)} | {l_pp:.1f} | {b_pp:.1f} | {ratio(l_pp, b_pp)} | "
              f"{l_seq:.1f} | {b_seq:.1f} | {ratio(l_seq, b_seq)} | {l_e2e:.1f} | {b_e2e:.1f} | {ratio(l_e2e, b_e2e)} |")
    print()
    print(f"| file | decode b1 @{PROMPT} loom | llama.cpp | ratio | decode b1 read bound tok/s | "
          f"loom b1 / bound | llama.cpp b1 / bound |")
    print("|---|" + "---:|" * 6)
    for name, l_deep, b_deep, bound, l_tg, b_tg in bounds:
        print(f"| {name} | {l_deep:.2f} | {b_deep:.2f} | {ratio(l_deep, b_deep)} | {bound:.2f} | "
              f"{l_tg / bound:.0%} | {b_tg / bound:.0%} |")
    print()
    print("| file | first load + 1 token loom s | load + 1 token loom s | llama.cpp s | llama.cpp / loom | "
          "peak RSS loom GB | llama.cpp GB |")
    print("|---|" + "---:|" * 6)
    for name, first, ((l_s, l_rss), (b_s, b_rss)) in loads:
        print(f"| {name} | {first:.2f} | {l_s:.2f} | {b_s:.2f} | {ratio(b_s, l_s)} | {l_rss:.2f} | {b_rss:.2f} |")


if __name__ == "__main__":
    main()
