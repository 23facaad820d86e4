#!/usr/bin/env bash
# model-parts.sh — the default model (98 MB) cannot travel in one device call beside the tree and
# the staged binaries (64 MiB a call), so it goes in two: this compresses it (xz) and cuts it into
# .gpu/m1/part and .gpu/m2/part (about 45 MB each; .gpu/ must be in .git/info/exclude).
#
#   tools/device/model-parts.sh [MODEL.gguf]        (default: plumb's cached default model)
#
# Carry .gpu/m1 in one call that copies it out of the tree (`cp .gpu/m1/part /tmp/m/part1`), then
# .gpu/m2 in the next call, made while the machine is still warm (it is given back 30 s after a
# call ends), which rebuilds the file: `cat /tmp/m/part1 .gpu/m2/part | xz -d > /tmp/m/model.gguf`
# (check its sha256). Move the large fixtures out of the tree for the first call if it runs
# over: only fixtures/smollm2 is read on the GPU machine (by plumb check). tools/device/ab-smol.sh
# runs the second call's A/B.
set -euo pipefail
cd "$(dirname "$0")/../.."
MODEL=${1:-${PLUMB_HOME:-$HOME/.cache/plumb}/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p .gpu/m1 .gpu/m2
tmp=$(mktemp -d)
xz -T2 -6 -c "$MODEL" >"$tmp/model.xz"
size=$(stat -c %s "$tmp/model.xz")
half=$(((size + 1) / 2))
head -c "$half" "$tmp/model.xz" >.gpu/m1/part
tail -c +"$((half + 1))" "$tmp/model.xz" >.gpu/m2/part
rm -rf "$tmp"
sha256sum "$MODEL"
ls -la .gpu/m1/part .gpu/m2/part
