#!/usr/bin/env python3
"""Batch-1 decode with and without prompt-lookup drafting (--prompt-lookup-num-tokens),
runs alternating, on a prompt whose continuation repeats it and on text that does not.
Prints each run's decode tok/s and, per prompt, the median ratio and the acceptance.

  python3 bench/prompt_lookup_bench.py [--loom build/loom] [--model models/loom-kjv-tiny]
                                       [--rounds 7] [--new-tokens 128] [--k 8] [--batch]
"""
import argparse
import json
import re
import statistics
import subprocess

VERSES = ("In the beginning God created the heaven and the earth. And the earth was without form, and void; "
          "and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. "
          "And God said, Let there be light: and there was light. ")
# name: (prompt, sampling flags). Drafting never changes the tokens, sampled or not.
CASES = {
    # The passage twice and its start a third time: the continuation quotes it.
    "repeating (greedy)": (VERSES * 2 + "In the beginning", ["--greedy"]),
    # A fresh start; greedy, the tiny model soon loops over its own phrases.
    "fresh prompt (greedy)": ("Blessed are the meek", ["--greedy"]),
    # Sampled at temperature 0.9 it writes text that does not repeat: drafts are rarely
    # accepted, and the draft length backs off.
    "non-repeating (sampled, seed 3)": ("Blessed are the meek", ["--temperature", "0.9", "--seed", "3"]),
}


def run(loom, model, prompt, sampling, new_tokens, k, threads, through_batch):
    flags = ["--model", model, "-n", str(new_tokens), "--prompt-lookup-num-tokens", str(k)] + sampling
    if threads:
        flags += ["--threads", str(threads)]
    if not through_batch:
        cmd = [loom, "generate", "--prompt", prompt, "--json"] + flags
        out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        return out["generated_ids"], out["timings"]
    # One request through the continuous-batching manager (loom batch): its generated
    # tok/s from the summary (prefill included), its counts from its output line.
    cmd = [loom, "batch", "-i", "-", "-o", "-", "--no-progress"] + flags
    done = subprocess.run(cmd, check=True, capture_output=True, text=True,
                          input=json.dumps({"id": "a", "prompt": prompt}) + "\n")
    line = json.loads(done.stdout)
    rate = float(re.search(r"([0-9.]+) generated tok/s", done.stderr).group(1))
    return line["generated_ids"], {"decode_tokens_per_second": rate,
                                   "drafted_tokens": line.get("drafted_tokens", 0),
                                   "accepted_draft_tokens": line.get("accepted_draft_tokens", 0)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loom", default="build/loom")
    ap.add_argument("--model", default="models/loom-kjv-tiny")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batch", action="store_true", help="through loom batch (the manager) instead of loom generate")
    a = ap.parse_args()
    for name, (prompt, sampling) in CASES.items():
        ratios, plain_rates, spec_rates = [], [], []
        drafted = accepted = 0
        for r in range(a.rounds):
            # Alternate which goes first, so drift on a shared machine hits both alike.
            order = [0, a.k] if r % 2 == 0 else [a.k, 0]
            got = {}
            for k in order:
                got[k] = run(a.loom, a.model, prompt, sampling, a.new_tokens, k, a.threads, a.batch)
            if got[0][0] != got[a.k][0]:
                raise SystemExit(f"{name}: drafting changed the tokens")
            plain, spec = got[0][1]["decode_tokens_per_second"], got[a.k][1]["decode_tokens_per_second"]
            plain_rates.append(plain)
            spec_rates.append(spec)
            ratios.append(spec / plain)
            drafted += got[a.k][1]["drafted_tokens"]
            accepted += got[a.k][1]["accepted_draft_tokens"]
            print(f"{name} round {r}: plain {plain:.0f} tok/s, K={a.k} {spec:.0f} tok/s ({spec / plain:.2f}x)")
        print(f"== {name}: median plain {statistics.median(plain_rates):.0f} tok/s, K={a.k} "
              f"{statistics.median(spec_rates):.0f} tok/s, median ratio {statistics.median(ratios):.2f}x, "
              f"accepted {accepted}/{drafted} drafted ({100.0 * accepted / max(drafted, 1):.0f}%)")


if __name__ == "__main__":
    main()
