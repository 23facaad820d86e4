#!/usr/bin/env bash
# The emulator's cost of one thread crossing one __syncthreads: 100 blocks of 256 threads, 100
# barriers each (barrier.cu), built by translate.py and launched directly (barrier.cpp).
#   bash tools/cuda-emu/bench/run.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
g++ -O2 -include string -o "$tmp/barrier" "$here/barrier.cpp" -ldl
python3 "$here/../translate.py" "$here/barrier.cu" "$tmp/barrier.so"
for i in 1 2 3; do "$tmp/barrier" "$tmp/barrier.so"; done
