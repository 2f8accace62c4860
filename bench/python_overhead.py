#!/usr/bin/python3
"""Python overhead (a benchmark, not a test): the same requests through
model.generate_batch from Python and through `loom batch`, and the per-token cost of a
Python streamer in generate(). Prints a table.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_overhead.py [--requests 32] [--new-tokens 64]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import loom

here = os.path.dirname(os.path.abspath(__file__))
source = os.path.dirname(here)
parser = argparse.ArgumentParser()
parser.add_argument("--model", default=os.path.join(source, "models", "loom-kjv-tiny"))
parser.add_argument("--loom", default=os.path.join(source, "build", "loom"))
parser.add_argument("--requests", type=int, default=32)
parser.add_argument("--new-tokens", type=int, default=64)
parser.add_argument("--stream-tokens", type=int, default=200, help="tokens of the single-request streamer runs")
parser.add_argument("--repeats", type=int, default=5)
args = parser.parse_args()

tok = loom.AutoTokenizer.from_pretrained(args.model)
model = loom.AutoModelForCausalLM.from_pretrained(args.model)
verses = ["In the beginning God created", "And the earth was without form", "The LORD is my shepherd",
          "Blessed are the meek", "And God said, Let there be light", "For God so loved the world"]
prompts = [tok.encode(verses[i % len(verses)] + f" {i}") for i in range(args.requests)]
n = args.new_tokens
lines = "".join(json.dumps({"id": f"r{i}", "prompt_ids": p}) + "\n" for i, p in enumerate(prompts))


def cli_batch():
    """Seconds of the generation itself, as `loom batch` reports it (without process start and load)."""
    r = subprocess.run([args.loom, "batch", "--model", args.model, "-i", "-", "-o", "-", "--no-progress", "-n", str(n),
                        "--greedy"], input=lines, capture_output=True, text=True, check=True)
    m = re.search(r"generated tokens in ([0-9.]+) s", r.stderr)
    tokens = sum(len(json.loads(l)["generated_ids"]) for l in r.stdout.splitlines())
    return float(m.group(1)), tokens


def py_batch():
    t0 = time.perf_counter()
    out = model.generate_batch(prompts, max_new_tokens=n, do_sample=False, progress_bar=False)
    return time.perf_counter() - t0, sum(len(o.generated_tokens) for o in out.values())


class NullStreamer(loom.BaseStreamer):
    def put(self, value):
        pass

    def end(self):
        pass


class QuietTextStreamer(loom.TextStreamer):
    def on_finalized_text(self, text, stream_end=False):
        pass


def py_generate(streamer):
    t0 = time.perf_counter()
    out = model.generate([prompts[0]], max_new_tokens=args.stream_tokens, do_sample=False, eos_token_id=[],
                         streamer=streamer)
    return time.perf_counter() - t0, out.shape[1] - len(prompts[0])


def best(fn, *a):
    runs = [fn(*a) for _ in range(args.repeats)]
    return min(runs, key=lambda r: r[0])


py_batch()  # page the weights in
cli_s, cli_tokens = best(cli_batch)
py_s, py_tokens = best(py_batch)
assert cli_tokens == py_tokens, (cli_tokens, py_tokens)
plain_s, g_tokens = best(py_generate, None)
null_s, _ = best(py_generate, NullStreamer())
text_s, _ = best(py_generate, QuietTextStreamer(tok))

print(f"model {os.path.basename(args.model)}; batch: {args.requests} requests × {n} new tokens (greedy); "
      f"streamers: 1 request × {g_tokens} tokens; best of {args.repeats}")
print(f"| case | seconds | tokens/s | ratio |")
print(f"|---|---|---|---|")
print(f"| loom batch (C++) | {cli_s:.3f} | {cli_tokens / cli_s:.1f} | 1.000 |")
print(f"| generate_batch (Python) | {py_s:.3f} | {py_tokens / py_s:.1f} | {cli_s / py_s:.3f} |")
print(f"| generate, no streamer | {plain_s:.3f} | {g_tokens / plain_s:.1f} | |")
print(f"| generate, no-op streamer | {null_s:.3f} | {g_tokens / null_s:.1f} | {(null_s - plain_s) / g_tokens * 1e6:+.1f} µs/token |")
print(f"| generate, TextStreamer (no print) | {text_s:.3f} | {g_tokens / text_s:.1f} | {(text_s - plain_s) / g_tokens * 1e6:+.1f} µs/token |")
