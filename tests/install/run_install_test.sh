#!/usr/bin/env bash
# Installs loom into a temporary prefix, then, using only what was installed:
# the Python package (Debian's python3) generates and exports a portable program;
# a C++ consumer built with find_package(loom CONFIG) and one built with
# pkg-config generate with loom's engine and run the program with the portable
# runtime. Every continuation must equal the installed `loom generate`.
# Usage: run_install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
model="$prefix/share/loom/models/loom-kjv-tiny"
prompt=(4090 1130 258 2081)
n=8
csv=$(IFS=,; echo "${prompt[*]}")
expected=$("$prefix/bin/loom" generate --model "$model" --prompt-ids "$csv" -n $n --greedy --json |
  /usr/bin/python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["generated_ids"])))')
[[ -n "$expected" ]] || { echo "installed loom generate printed nothing"; exit 1; }

# The Python package, from the prefix's site-packages only (run outside the source tree).
site=$(ls -d "$prefix"/lib/python3*/dist-packages)
got=$(cd "$work" && PYTHONPATH="$site" /usr/bin/python3 -c "
import loom
from loom import exporters
assert loom.__file__.startswith('$prefix'), loom.__file__
m = loom.AutoModelForCausalLM.from_pretrained('$model')
exporters.ExecutorchExporter().export(m, '$work/model.lpte')
out = m.generate([[$csv]], max_new_tokens=$n, do_sample=False, eos_token_id=[])
print(' '.join(map(str, out[0][${#prompt[@]}:])))
")
[[ "$got" == "$expected" ]] || { echo "installed Python package: '$got' != loom generate '$expected'"; exit 1; }

check_consumer() {  # name, binary
  local out
  out=$("$2" "$model" "$work/model.lpte" $n "${prompt[@]}")
  local engine portable
  engine=$(echo $(sed -n 1p <<<"$out"))
  portable=$(echo $(sed -n 2p <<<"$out"))
  [[ "$engine" == "$expected" ]] || { echo "$1 consumer (engine): '$engine' != loom generate '$expected'"; exit 1; }
  [[ "$portable" == "$expected" ]] || { echo "$1 consumer (portable): '$portable' != loom generate '$expected'"; exit 1; }
}

# 1. The CMake package.
cmake -S "$here/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
check_consumer find_package "$work/cmake-build/consumer"

# 2. pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
g++ -O1 "$here/consumer/consumer.cc" -o "$work/pc-consumer" $(pkg-config --cflags --libs loom)
check_consumer pkg-config "$work/pc-consumer"

echo "install test: Python package, find_package and pkg-config consumers (engine and portable runtime) all generate: $expected"
