#!/usr/bin/env bash
# profile-ab-8b.sh — two builds' kernels event-timed on the Llama-3.1-8B shape in one call: the bit
# tests on the second build, then for each build a one-request decode profile
# (`PLUMB_CUDA_PROFILE=decode`, a 512-token prompt and 64 tokens) and a 2,048-token prefill's
# (`PLUMB_CUDA_PROFILE=1`), printing the kernels matching KERNELS (default: attention). For a
# change that moves one kernel's time by less than an end-to-end run's spread.
#
#   tools/device/profile-ab-8b.sh DIR_A DIR_B [OUT_DIR]
#
# DIR_A, DIR_B: what tools/device/stage.sh writes (plumb and the backend's test binaries; their
# precompiled kernels are seeded into $PLUMB_HOME). The checkpoint goes to /tmp/l8b (made once by
# `plumb synth`). OUT_DIR (optional) keeps each run's full profile.
set -u
A=${1:?usage: profile-ab-8b.sh DIR_A DIR_B [OUT_DIR]}
B=${2:?usage: profile-ab-8b.sh DIR_A DIR_B [OUT_DIR]}
OUT=${3:-$(mktemp -d)}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PLUMB_HOME=${PLUMB_HOME:-/tmp/plumb-home} PLUMB_REQUIRE_GPU=1
bash "$(dirname "$0")/seed-kernels.sh" "$A" "$B"
status=0
SECONDS=0
[ -e /tmp/l8b/config.json ] || "$B/plumb" synth --arch llama-3.1-8b -t 14 /tmp/l8b >"$OUT/synth.log" 2>&1 &
for t in row_invariance conformance graphs; do
    timeout 120 "$B/$t" --test-threads 1 >"$OUT/$t.log" 2>&1 || status=1
    echo "$t: $(grep 'test result' "$OUT/$t.log" | tail -1)"
done
wait
echo "(synth and tests ${SECONDS}s)"
P=(--device cuda --kv-dtype f16 --model /tmp/l8b --depth 0 --repetitions 1)
for d in "$A" "$B"; do
    tag=$(basename "$d")
    echo "## $d: decode, one request"
    PLUMB_CUDA_PROFILE=decode timeout 60 "$d/plumb" bench "${P[@]}" --prompt-len 512 --gen-len 64 >"$OUT/decode-$tag.txt" 2>&1
    grep -E "${KERNELS:-attention}|^tg" "$OUT/decode-$tag.txt"
    echo "## $d: prefill, 2,048 tokens"
    PLUMB_CUDA_PROFILE=1 timeout 60 "$d/plumb" bench "${P[@]}" --prompt-len 2048 --gen-len 2 >"$OUT/prefill-$tag.txt" 2>&1
    grep -E "${KERNELS:-attention}|^pp" "$OUT/prefill-$tag.txt"
    echo "(${SECONDS}s)"
done
exit $status
