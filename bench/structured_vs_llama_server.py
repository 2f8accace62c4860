#!/usr/bin/env python3
"""Schema-constrained generation through two OpenAI-compatible servers on the same GGUF
file: `loom serve` and llama.cpp's `llama-server` (built outside this repository), one
at a time, never side by side. Each round sends the same N concurrent /v1/completions
requests (greedy, max_tokens new tokens) twice: unconstrained, then constrained to the
schema (loom: `response_format: {"type": "json_schema", ...}`; llama-server: its
`json_schema` field, which it turns into a GBNF grammar); it reports generated tok/s (completion
tokens over wall time, prefill included), the constrained/unconstrained ratio per
server and loom/llama.cpp per mode, and checks every constrained reply is a prefix of
an instance of the schema (both stop at max_tokens inside the structure). Best of
--rounds per server and mode; the servers alternate between rounds.

  /usr/bin/python3 bench/structured_vs_llama_server.py --gguf /tmp/llama1b-tok-q4_0.gguf \\
      --llama-server /tmp/llamacpp-src/build/bin/llama-server [--requests 32 --max-tokens 64 --rounds 2]
"""
import argparse
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["Describe a small web service's configuration.", "Give me the settings for a cache server.",
           "What would a deployment of three workers look like?", "Write the config of a database replica."]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.5)
    sys.exit("server not ready in time")


def start(kind, args):
    port = free_port()
    if kind == "loom":
        cmd = [args.loom, "serve", "--model", args.gguf, "--port", str(port), "--host", "127.0.0.1",
               "--threads", str(args.threads), "--max-requests-per-batch", str(args.requests), "--no-request-log"]
    else:
        ctx = args.requests * (args.max_tokens + 160)
        cmd = [args.llama_server, "-m", args.gguf, "--port", str(port), "--host", "127.0.0.1", "-t", str(args.threads),
               "-tb", str(args.threads), "-np", str(args.requests), "-c", str(ctx), "--no-webui", "-cb", "--metrics"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(f"/tmp/structured_vs_{kind}.log", "w"))
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, proc)
    return proc, url


def complete(url, body):
    """The reply, or None when the server answered 500 (see predicted_tokens)."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=3600) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        if e.code != 500:
            raise
        return None


def predicted_tokens(url):
    # llama-server (May 2026) parses every finished text with its chat-output parser,
    # which throws on text that is not valid UTF-8 (a random-weight model cut at max_tokens
    # inside a multi-byte character) and answers 500 after generating it; its /metrics
    # counter still counts those tokens, so its throughput is read from there.
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        m = re.search(r"^llamacpp:tokens_predicted_total\s+([\d.e+]+)", r.read().decode(), re.M)
        return float(m.group(1))


def served_model(url):
    with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
        return json.loads(r.read())["data"][0]["id"]


def run_mode(kind, url, args, schema):
    model = served_model(url)
    bodies = []
    for i in range(args.requests):
        b = {"model": model, "prompt": PROMPTS[i % len(PROMPTS)] + f" (case {i}) As JSON:",
             "max_tokens": args.max_tokens, "temperature": 0}
        if schema is not None and kind == "loom":
            b["response_format"] = {"type": "json_schema", "json_schema": {"name": "config", "schema": schema}}
        elif schema is not None:
            b["json_schema"] = schema  # llama-server's own field (its completions take no response_format)
        bodies.append(b)
    before = predicted_tokens(url) if kind != "loom" else 0
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.requests) as pool:
        replies = list(pool.map(lambda b: complete(url, b), bodies))
    wall = time.time() - t0
    failed = sum(r is None for r in replies)
    if kind == "loom":
        if failed:
            sys.exit(f"loom answered 500 to {failed} requests")
        tokens = sum(r["usage"]["completion_tokens"] for r in replies)
    else:
        tokens = int(predicted_tokens(url) - before)
    if failed:
        print(f"  ({kind}: {failed} of {len(replies)} replies were 500s from its output parser; tokens from /metrics)")
    texts = [r["choices"][0]["text"] for r in replies if r is not None]
    if schema is not None and failed:
        sys.exit(f"{kind} failed {failed} constrained requests")
    return tokens / wall, tokens, texts


def fits_schema(text, schema):
    """A whole instance that validates, or a prefix cut by max_tokens inside the object."""
    t = text.strip()
    if not t.startswith("{"):
        return False
    try:
        value = json.loads(t)
    except ValueError:
        return True
    try:
        import jsonschema  # Debian's python3-jsonschema
        jsonschema.validate(value, schema)
    except ImportError:
        pass
    except Exception:
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="a GGUF file with its tokenizer (both servers load it)")
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--loom", default=os.path.join(ROOT, "build", "loom"))
    ap.add_argument("--schema", default=os.path.join(ROOT, "bench", "structured_nested_schema.json"))
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with open(args.schema) as f:
        schema = json.load(f)
    best = {}
    for rnd in range(args.rounds):
        for kind in ("loom", "llama.cpp"):
            proc, url = start(kind, args)
            try:
                run_mode(kind, url, args, None)  # warm-up: first-touch of the weights, thread pools
                for mode, s in (("unconstrained", None), ("json_schema", schema)):
                    tps, tokens, texts = run_mode(kind, url, args, s)
                    if s is not None:
                        bad = [t for t in texts if not fits_schema(t, s)]
                        if bad:
                            print(f"{kind}: {len(bad)} constrained replies do not look like the schema: {bad[0][:80]!r}")
                    print(f"round {rnd + 1} {kind:9s} {mode:13s} {tps:7.2f} tok/s ({tokens} tokens)", flush=True)
                    best[(kind, mode)] = max(best.get((kind, mode), 0), tps)
            finally:
                proc.terminate()
                proc.wait(60)
    print(f"\n{args.requests} concurrent completions, {args.max_tokens} new tokens, greedy, {os.path.basename(args.gguf)}, "
          f"{args.threads} threads, best of {args.rounds}")
    print("| server | unconstrained tok/s | json_schema tok/s | constrained / unconstrained |")
    print("|---|---:|---:|---:|")
    for kind in ("loom", "llama.cpp"):
        u, c = best[(kind, "unconstrained")], best[(kind, "json_schema")]
        print(f"| {kind} | {u:.2f} | {c:.2f} | {c / u:.3f} |")
    for mode in ("unconstrained", "json_schema"):
        print(f"loom / llama.cpp, {mode}: {best[('loom', mode)] / best[('llama.cpp', mode)]:.2f}x")


if __name__ == "__main__":
    main()
