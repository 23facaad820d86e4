#!/usr/bin/env bash
# ab-smol.sh — the default model's A/B of builds or settings in the second of two device calls
# (the model travels in two halves: tools/device/model-parts.sh): the model rebuilt from its
# halves and checked, optionally each setting's bit tests, then `plumb bench` (pp512, tg128 and
# tg128 at depth 512, each the median of three) for every setting in turn, ROUNDS times,
# alternating the order each round, and one event-timed kernel table per setting.
#
#   SETTINGS="main:BIN=/tmp/bq new: apart:PLUMB_CUDA_FUSE_SWIGLU=0" \
#       tools/device/ab-smol.sh BIN_DIR OUT_DIR PART1 PART2
#
# SETTINGS: space-separated TAG:ASSIGNMENTS as in ab-8b.sh (comma-separated VAR=VALUE; BIN=DIR
# runs that setting's binaries from DIR instead of BIN_DIR). PART1, PART2: the halves of the xz
# stream (the first copied out of the first call's tree, the second from this call's). TESTS
# names test binaries to run under each build first (default none, e.g. "fused row_invariance").
# ROUNDS defaults to 3; KV the KV cache's type (default f16; f32 is plumb's default and takes the
# f32 attention kernel). Writes OUT_DIR/ab.txt; exits non-zero when the model's checksum or a test
# failed.
set -u
B=${1:?usage: ab-smol.sh BIN_DIR OUT_DIR PART1 PART2}
OUT=${2:?usage: ab-smol.sh BIN_DIR OUT_DIR PART1 PART2}
P1=${3:?the first half of the model}
P2=${4:?the second half of the model}
read -r -a SET <<<"${SETTINGS:?SETTINGS=\"TAG:VAR=VALUE,... TAG:...\"}"
# shellcheck source=tools/device/default-model.sh
source "$(dirname "$0")/default-model.sh"
mkdir -p "$OUT"
L=$OUT/ab.txt
# tag_of, env_of, bin_of, run_with, gpu_env, reversed, bench_rounds
# shellcheck source=tools/device/settings.sh
source "$(dirname "$0")/settings.sh"
gpu_env
M=$(dirname "$P1")/smollm2.gguf
cat "$P1" "$P2" | xz -d >"$M" || exit 1
echo "$DEFAULT_MODEL_SHA256  $M" | sha256sum -c - >>"$L" 2>&1 || { cat "$L"; exit 1; }
status=0

bash "$(dirname "$0")/seed-kernels.sh" "$B" $(for s in "${SET[@]}"; do bin_of "$s"; done)

for s in "${SET[@]}"; do
    for t in ${TESTS:-}; do
        run_with "$s" timeout 200 "$(bin_of "$s")/$t" --test-threads 1 >"$OUT/$t-$(tag_of "$s").log" 2>&1
        rc=$?
        [ $rc = 0 ] || status=1
        echo "[$(tag_of "$s")] $t rc=$rc $(grep 'test result' "$OUT/$t-$(tag_of "$s").log" | tail -1)" >>"$L"
    done
done
bench_rounds "pp512, tg128, depth 512" "${ROUNDS:-3}" --repetitions 3 --depth 512
for s in "${SET[@]}"; do
    echo "## [$(tag_of "$s")] event-timed decode kernels (PLUMB_CUDA_PROFILE=decode)" >>"$L"
    run_with "$s" PLUMB_CUDA_PROFILE=decode timeout 60 "$(bin_of "$s")/plumb" bench --device cuda --model "$M" \
        --kv-dtype "${KV:-f16}" --prompt-len 512 --gen-len 128 --depth 0 --repetitions 1 2>&1 |
        grep -E "^[a-z_0-9]+ +[0-9]|CUDA profile" >>"$L"
done
cat "$L"
exit $status
