#!/usr/bin/python3
"""Writes the model card (README.md) from train.py's train_result.json.

train.py calls write_card() at the end of a run; run this file by hand to
re-render a card from a saved result without retraining:
  /usr/bin/python3 models/train/write_card.py --result WORK/train_result.json \
      --corpus WORK/corpus.json --out models/loom-kjv-tiny
"""
import json
import math
import os


def _fmt_time(seconds):
    m, s = divmod(int(round(seconds)), 60)
    return "%d min %02d s" % (m, s) if m else "%d s" % s


def _history_rows(history, max_rows=12):
    if len(history) <= max_rows:
        return history
    stride = max(1, len(history) // max_rows)
    rows = history[stride - 1::stride]
    if rows[-1] is not history[-1]:
        rows.append(history[-1])
    return rows


def render(result, corpus):
    cfg = result["config"]
    a = result["args"]
    sp = result["special_tokens"]
    gen = result["generation_config"]
    name = os.path.basename(os.path.normpath(a["out"]))
    piece = a["seq_len"] - 1
    bytes_per_param = 4 if result["save_dtype"] == "float32" else 2
    n_embed = cfg["vocab_size"] * cfg["hidden_size"]
    lines = []
    w = lines.append
    w("---")
    w("language: en")
    w("library_name: transformers")
    w("pipeline_tag: text-generation")
    w("tags: [llama, tiny, loom, king-james-bible]")
    w("---")
    w("")
    w("# %s" % name)
    w("")
    w("loom's bundled default model: a tiny `LlamaForCausalLM` (%.2f M parameters) trained from scratch "
      "on the King James Bible, so that `loom generate`, `loom chat` and `./scripts/demo` show real, "
      "trained text with nothing to download. It writes KJV-flavoured English; it knows nothing else "
      "and is not an assistant." % (result["params"] / 1e6))
    w("")
    w("It loads unchanged in Hugging Face Transformers "
      "(`AutoModelForCausalLM.from_pretrained`, `AutoTokenizer.from_pretrained`) and in loom.")
    w("")
    w("## Architecture")
    w("")
    w("| | |")
    w("|---|---|")
    w("| architecture | `LlamaForCausalLM` (`model_type: llama`) |")
    w("| parameters | %s (embedding %s, tied with the LM head, so no `lm_head.weight`) |"
      % ("{:,}".format(result["params"]), "{:,}".format(n_embed)))
    w("| hidden size / intermediate (SiLU-gated MLP) | %d / %d |" % (cfg["hidden_size"], cfg["intermediate_size"]))
    w("| layers | %d |" % cfg["num_hidden_layers"])
    w("| attention | %d query heads, %d key/value heads (GQA), head_dim %d, no biases |"
      % (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]))
    w("| positions | RoPE, theta %g, `max_position_embeddings` %d (trained on %d-token windows) |"
      % (cfg["rope_theta"], cfg["max_position_embeddings"], a["seq_len"]))
    w("| norm | RMSNorm, eps %g |" % cfg["rms_norm_eps"])
    w("| vocabulary | %d |" % cfg["vocab_size"])
    w("| weights | `model.safetensors`, %s, %.1f MB |"
      % (result["save_dtype"], result["params"] * bytes_per_param / 1e6))
    w("")
    w("## Tokenizer")
    w("")
    w("Byte-level BPE in `tokenizer.json` (GPT-2 pre-tokenizer regex via `ByteLevel` with "
      "`use_regex: true`, `add_prefix_space: false`; `ByteLevel` decoder; no normalizer), trained on "
      "the training split with the Hugging Face `tokenizers` library's BPE trainer (npm "
      "`tokenizers@0.23.2`, `models/train/train_tokenizer.js`). Ids 0-255 are the 256 byte symbols "
      "in byte order (every byte sequence is encodable), then %d merges, then the special tokens:"
      % (cfg["vocab_size"] - 256 - len(sp)))
    w("")
    w("| token | id | use |")
    w("|---|---|---|")
    uses = {"<|begin_of_text|>": "BOS; the post-processor prepends it (`add_bos_token: true`)",
            "<|end_of_text|>": "EOS (`eos_token_id` in config.json)",
            "<|system|>": "chat role marker", "<|user|>": "chat role marker",
            "<|assistant|>": "chat role marker", "<|end|>": "ends a chat message; also a stop token"}
    for tok, i in sorted(sp.items(), key=lambda kv: kv[1]):
        w("| `%s` | %d | %s |" % (tok, i, uses.get(tok, "")))
    w("")
    w("The chat template in `tokenizer_config.json` renders "
      "`<|begin_of_text|><|system|>\\n...<|end|>\\n<|user|>\\n...<|end|>\\n<|assistant|>\\n` "
      "(roles other than system/assistant render as user). The model was trained on plain Bible "
      "text only: it has never seen these chat tokens and will not follow instructions; "
      "after `<|assistant|>` it simply continues in KJV style. It never produced EOS in training "
      "either, so generation ends at `max_new_tokens`.")
    w("")
    w("## Corpus and licence")
    w("")
    w("The King James Version (1611) as shipped in Debian's `bible-kjv-text` package "
      "(`/usr/lib/bible.data`), extracted with its `bible` program (`bible -f -p /usr/lib "
      "gen1:1-rev22:21`) by `models/train/prepare_corpus.py`: one verse per line without "
      "references, chapters separated by one blank line, whitespace runs collapsed. "
      "The KJV text is in the **public domain** (Debian's copyright file: \"The copyright for the "
      "King James Version text of the Bible is expired\").")
    w("")
    w("Held-out split: the 1,189 chapters are numbered 0-1188 in canonical order; chapter i is "
      "held out when i % 20 == 19 (59 whole chapters, never random lines).")
    w("")
    w("| split | chapters | bytes | tokens | sha256 |")
    w("|---|---|---|---|---|")
    for split, ntok in (("train", result["train_tokens"]), ("valid", result["valid_tokens"])):
        c = corpus.get(split, {})
        w("| %s | %s | %s | %s | `%s` |" % (split, c.get("chapters", "?"), "{:,}".format(c.get("bytes", 0)),
                                           "{:,}".format(ntok), c.get("sha256", "?")))
    total = corpus.get("train", {}).get("bytes", 0) + corpus.get("valid", {}).get("bytes", 0)
    if total:
        w("")
        w("The held-out split is %.2f%% of the text by bytes." % (100.0 * corpus["valid"]["bytes"] / total))
    w("")
    w("## Training")
    w("")
    w("```")
    w("nice -n 10 %s" % result["command"])
    w("```")
    w("")
    w("(`scripts/train-default-model` runs corpus extraction, tokenizer training, tokenization and "
      "`models/train/train.py`; everything is seeded, seed %d.)" % a["seed"])
    w("")
    w("- %d steps x %d sequences x %d tokens = %s tokens (%.2f epochs of the training split); "
      "each sequence is BOS + a window starting at a uniformly random token offset"
      % (a["steps"], a["batch"], a["seq_len"], "{:,}".format(result["tokens_seen"]),
         result["tokens_seen"] / result["train_tokens"]))
    w("- AdamW (betas 0.9/0.95, weight decay %g on matrices), peak LR %g, %d warmup steps, cosine "
      "decay to %g, gradient clipping 1.0; bf16 autocast for matmuls with float32 master weights%s"
      % (a["weight_decay"], a["lr"], a["warmup"], a["lr"] * a["min_lr_ratio"],
         "" if not a.get("no_bf16") else " (disabled for this run: float32)"))
    w("- init: normal(0, 0.02), residual output projections (o_proj, down_proj) scaled by "
      "1/sqrt(2 x layers)")
    w("- PyTorch %s, %d thread%s, on a shared 2-core %s: training %s wall (%s CPU), "
      "evaluation %s wall, train.py as a whole %s wall (%s CPU). The wall time "
      "depends on what else the machine runs (this run was niced and shared the machine with "
      "other builds); the CPU time is what the run itself costs, and on an otherwise idle "
      "machine a single-threaded run takes about that long."
      % (result["torch"], result["threads"], "" if result["threads"] == 1 else "s", result["cpu"],
         _fmt_time(result["train_seconds"]), _fmt_time(result["train_cpu_seconds"]),
         _fmt_time(result["eval_seconds"]), _fmt_time(result["total_seconds"]),
         _fmt_time(result["cpu_seconds"])))
    w("")
    w("| step | train loss (mean of the last %d steps) | LR |" % a["log_every"])
    w("|---|---|---|")
    for h in _history_rows(result["history"]):
        w("| %d | %.4f | %.2e |" % (h["step"], h["train_loss"], h["lr"]))
    w("")
    w("## Results")
    w("")
    vl = result["valid_loss"]
    w("| | loss (nats/token) | perplexity |")
    w("|---|---|---|")
    w("| **validation** (held-out chapters, procedure below) | **%.4f** | %.2f |" % (vl, math.exp(vl)))
    w("| train, first %s training tokens, same procedure | %.4f | %.2f |"
      % ("{:,}".format(result["valid_tokens"]), result["final_train_eval_loss"],
         math.exp(result["final_train_eval_loss"])))
    if result["final_train_loss"] is not None:
        w("| train, running mean of the last %d steps (bf16 autocast) | %.4f | %.2f |"
          % (a["log_every"], result["final_train_loss"], math.exp(result["final_train_loss"])))
    w("")
    w("### Validation-loss procedure (what `loom perplexity` must reproduce)")
    w("")
    w("1. Read the held-out text file (`valid.txt`, %s bytes, UTF-8) and encode the **whole file "
      "as one string** with `tokenizer.json`, **without special tokens** (no BOS, no EOS): "
      "%s tokens." % ("{:,}".format(corpus.get("valid", {}).get("bytes", 0)), "{:,}".format(result["valid_tokens"])))
    w("2. Cut the token stream into consecutive, non-overlapping pieces of **%d tokens** "
      "(= context %d - 1). The last piece holds whatever remains (%d tokens here); it is scored, "
      "not dropped and not padded." % (piece, a["seq_len"], result["valid_tokens"] % piece or piece))
    w("3. Run each piece as its own sequence **`[BOS] + piece`** (BOS = `<|begin_of_text|>` id %d), "
      "fresh context, positions starting at 0, so at most %d positions. The logits at position j "
      "predict piece[j]: every held-out token is scored exactly once, the first token of each "
      "piece from BOS alone." % (sp["<|begin_of_text|>"], a["seq_len"]))
    w("4. Loss = sum over all scored tokens of -ln p(token) / number of scored tokens "
      "(%s), computed in float32. Perplexity = exp(loss)." % "{:,}".format(result["valid_tokens"]))
    w("")
    w("Reproduce `valid.txt` with `/usr/bin/python3 models/train/prepare_corpus.py --out DIR` "
      "(its sha256 is in the corpus table).")
    w("")
    w("## Samples")
    w("")
    w("Produced by the PyTorch training code on the final float32 weights, prompt encoded with BOS. "
      "Greedy, and sampled with temperature %g, top-p %g (torch.Generator seeded %d; other "
      "samplers draw different text). %d new tokens each."
      % (gen["temperature"], gen["top_p"], a["seed"], a["sample_tokens"]))
    w("")
    for s in result["samples"]:
        w("**%s**" % s["prompt"])
        w("")
        w("- greedy: %s" % json.dumps(s["greedy"]))
        w("- sampled: %s" % json.dumps(s["sampled"]))
        w("- greedy token ids (BOS, prompt, continuation): `%s`" % json.dumps(s["greedy_ids"]))
        w("")
    w("## Limitations")
    w("")
    w("- Trained only on the KJV (about 1 M tokens, %.1f epochs): the vocabulary and style are "
      "those of a 1611 Bible; it repeats itself in greedy decoding; facts are not its business."
      % (result["tokens_seen"] / result["train_tokens"]))
    w("- Trained on %d-token windows; positions beyond that (up to %d) work mechanically but "
      "were never trained." % (a["seq_len"], cfg["max_position_embeddings"]))
    w("- Chat tokens and the chat template exist so that the chat path can be exercised end to "
      "end; the model was never trained on conversations.")
    w("")
    return "\n".join(lines)


def write_card(out_dir, result, corpus_json):
    corpus = {}
    if corpus_json and os.path.exists(corpus_json):
        with open(corpus_json) as f:
            corpus = json.load(f)
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(render(result, corpus))


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description="Render a model card from train_result.json.")
    ap.add_argument("--result", required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(args.result) as fh:
        write_card(args.out, json.load(fh), args.corpus)
