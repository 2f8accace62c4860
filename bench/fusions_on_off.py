#!/usr/bin/python3
"""Each built-in fusion on and off: prefill and decode tok/s of `loom bench`, alternating.

For every model and thread count, one round runs `loom bench` once per kernel config
(none = the unfused graph, then each fusion alone, then all of them) in turn; each cell
is the best of --rounds rounds, so a minute when the shared machine is slow costs every
config alike. "× none" is the best against the best of the unfused graph; "median ×" is the
median over rounds of each run against the unfused run of its own round, which a busy
machine's drift moves less.

    /usr/bin/python3 bench/fusions_on_off.py --models models/loom-kjv-tiny --threads 1,2 --rounds 5

The configs are the built-in fusions of docs/kernels.md:
    qkv      {"Attention": "loom:FusedQKV"}
    gate_up  {"MLP": "loom:FusedGateUpMLP"}
    add_norm loom:AddRMSNorm on (self_attn, post_attention_layernorm)
    all      the three together
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ADD_NORM = [[["Attention", "model.layers.*.self_attn"], ["RMSNorm", "model.layers.*.post_attention_layernorm"]],
            "loom:AddRMSNorm"]
CONFIGS = {
    "none": None,
    "qkv": {"Attention": "loom:FusedQKV"},
    "gate_up": {"MLP": "loom:FusedGateUpMLP"},
    "add_norm": {"fusions": [ADD_NORM]},
    "all": {"Attention": "loom:FusedQKV", "MLP": "loom:FusedGateUpMLP", "fusions": [ADD_NORM]},
}


def bench(binary, model, threads, config_path, prompt_tokens, decode_tokens, repeats):
    cmd = [binary, "bench", "--model", model, "--threads", str(threads), "--prompt-tokens", str(prompt_tokens),
           "--decode-tokens", str(decode_tokens), "--repeats", str(repeats), "--no-bounds"]
    # "none" is the checkpoint's own modules: the CLI otherwise loads the built-in fusions.
    cmd += ["--kernel-config", config_path] if config_path else ["--no-builtin-fusions"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    header = None
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None and any(c.startswith("decode tok/s") for c in cells):
            header = cells
        elif header is not None and len(cells) == len(header) and not cells[0].startswith("---"):
            col = {name.split(" (")[0]: i for i, name in enumerate(header)}
            return float(cells[col["prefill tok/s"]]), float(cells[col["decode tok/s"]])
    sys.exit(f"no figures in the output of {' '.join(cmd)}:\n{out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loom", default="build/loom", help="the loom binary (default build/loom)")
    ap.add_argument("--models", default="models/loom-kjv-tiny", help="checkpoints or .gguf files, comma-separated")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="configs to run (default: " + ",".join(CONFIGS) + ")")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds; each cell is the best (default 5)")
    ap.add_argument("--prompt-tokens", type=int, default=64, help="prefill length (default 64)")
    ap.add_argument("--decode-tokens", type=int, default=128, help="decode tokens per run (default 128)")
    ap.add_argument("--repeats", type=int, default=2, help="--repeats of each loom bench run (default 2)")
    args = ap.parse_args()
    names = args.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            sys.exit(f"unknown config '{n}' (known: {', '.join(CONFIGS)})")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for n in names:
            if CONFIGS[n] is None:
                paths[n] = None
                continue
            paths[n] = os.path.join(tmp, n + ".json")
            with open(paths[n], "w") as f:
                json.dump(CONFIGS[n], f)
        print("| model | threads | config | prefill tok/s | × none | median × | decode tok/s | × none | median × |")
        print("|---|---|---|---|---|---|---|---|---|")
        for model in args.models.split(","):
            for threads in [int(t) for t in args.threads.split(",")]:
                best = {n: (0.0, 0.0) for n in names}
                ratios = {n: ([], []) for n in names}
                for _ in range(args.rounds):
                    run = {}
                    for n in names:
                        run[n] = bench(args.loom, model, threads, paths[n], args.prompt_tokens, args.decode_tokens,
                                       args.repeats)
                        best[n] = (max(best[n][0], run[n][0]), max(best[n][1], run[n][1]))
                    if "none" in run:
                        for n in names:
                            ratios[n][0].append(run[n][0] / run["none"][0])
                            ratios[n][1].append(run[n][1] / run["none"][1])
                base = best.get("none")
                for n in names:
                    p, d = best[n]
                    rp = f"{p / base[0]:.3f}" if base and base[0] else "-"
                    rd = f"{d / base[1]:.3f}" if base and base[1] else "-"
                    mp = f"{statistics.median(ratios[n][0]):.3f}" if ratios[n][0] else "-"
                    md = f"{statistics.median(ratios[n][1]):.3f}" if ratios[n][1] else "-"
                    print(f"| {os.path.basename(model.rstrip('/'))} | {threads} | {n} | {p:.1f} | {rp} | {mp} | {d:.2f} | {rd} | {md} |",
                          flush=True)


if __name__ == "__main__":
    main()
