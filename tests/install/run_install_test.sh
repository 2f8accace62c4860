#!/usr/bin/env bash
# Installs loom into a temporary prefix, builds a consumer against it with
# find_package(loom CONFIG) and with pkg-config, runs both, and imports the
# installed Python package with Debian's python3. Usage: run_install_test.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"

cmake --install "$build" --prefix "$prefix" >/dev/null
model="$prefix/share/loom/models/loom-kjv-tiny"
prompt=(4090 1130 258 2081)
expected=$("$prefix/bin/loom" generate --model "$model" --prompt-ids "$(IFS=,; echo "${prompt[*]}")" -n 8 --greedy --json |
  /usr/bin/python3 -c 'import json,sys; print(" ".join(map(str, json.load(sys.stdin)["generated_ids"])))')
[[ -n "$expected" ]] || { echo "installed loom generate printed nothing"; exit 1; }

# 1. CMake package.
cmake -S "$here/consumer" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
got=$("$work/cmake-build/consumer" "$model" 8 "${prompt[@]}")
[[ "$(echo $got)" == "$expected" ]] || { echo "find_package consumer: '$got' != loom generate '$expected'"; exit 1; }

# 2. pkg-config.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
pkg-config --exists loom
g++ -O1 "$here/consumer/consumer.cc" -o "$work/pc-consumer" $(pkg-config --cflags --libs loom)
got=$("$work/pc-consumer" "$model" 8 "${prompt[@]}")
[[ "$(echo $got)" == "$expected" ]] || { echo "pkg-config consumer: '$got' != loom generate '$expected'"; exit 1; }

# 3. The Python package, from the prefix's site-packages only.
site=$(ls -d "$prefix"/lib/python3*/dist-packages)
got=$(cd "$work" && PYTHONPATH="$site" /usr/bin/python3 -c "
import loom, sys
assert loom.__file__.startswith('$prefix'), loom.__file__
m = loom.AutoModelForCausalLM.from_pretrained('$model')
out = m.generate([[$(IFS=,; echo "${prompt[*]}")]], max_new_tokens=8, do_sample=False, eos_token_id=[])
print(' '.join(map(str, out[0][${#prompt[@]}:])))
")
[[ "$got" == "$expected" ]] || { echo "installed Python package: '$got' != loom generate '$expected'"; exit 1; }
echo "install test: CMake package, pkg-config and Python package all generate: $expected"
