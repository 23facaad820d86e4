#!/usr/bin/env bash
# ab-synth-prefill.sh — prefill A/B of builds or settings on a checkpoint that needs no transfer:
# an f32 SmolLM2-135M shape written by `plumb synth` on the GPU machine (its f32 weights take the
# CUDA-core kernels — `linear_split`, `linear_tile` — as the default model's Q4_1 do, so one call
# measures them where the default model takes two). `plumb bench` (pp512, tg32, depth 512, each
# the median of three, with receipts) for every setting in turn, ROUNDS times, the order reversed
# each round; then every kernel of a pp512 event-timed (PLUMB_CUDA_PROFILE=1) for each setting.
#
#   SETTINGS="off:PLUMB_CUDA_LINEAR_TILE=0 tile: tile32:PLUMB_CUDA_LINEAR_TILE=2" \
#       tools/device/ab-synth-prefill.sh BIN_DIR OUT_DIR
#
# SETTINGS: space-separated TAG:ASSIGNMENTS as in ab-8b.sh (comma-separated VAR=VALUE; BIN=DIR
# runs that setting's binaries from DIR). ROUNDS defaults to 2; PROMPT to 512. Writes
# OUT_DIR/ab.txt and OUT_DIR/bench-TAG-ROUND.json (first used in session 20:
# receipts/ab-cuda-session20.txt).
set -u
B=${1:?usage: ab-synth-prefill.sh BIN_DIR OUT_DIR}
OUT=${2:?usage: ab-synth-prefill.sh BIN_DIR OUT_DIR}
read -r -a SET <<<"${SETTINGS:?SETTINGS=\"TAG:VAR=VALUE,... TAG:...\"}"
mkdir -p "$OUT"
L=$OUT/ab.txt
# tag_of, env_of, bin_of, run_with, gpu_env, reversed, bench_rounds
# shellcheck source=tools/device/settings.sh
source "$(dirname "$0")/settings.sh"
gpu_env
M=${MODEL:-/tmp/smollm2-135m-f32}
P=${PROMPT:-512}
bash "$(dirname "$0")/seed-kernels.sh" "$B" $(for s in "${SET[@]}"; do bin_of "$s"; done)
if [ ! -f "$M/model.safetensors" ]; then
    "$B/plumb" synth --config "$(dirname "$0")/smollm2-135m-config.json" --dtype f32 "$M" >>"$L" 2>&1 || exit 1
fi
bench_rounds "pp$P, tg32, depth 512" "${ROUNDS:-2}" --prompt-len "$P" --gen-len 32 --repetitions 3
for s in "${SET[@]}"; do
    echo "## [$(tag_of "$s")] every kernel of a pp$P (PLUMB_CUDA_PROFILE=1)" >>"$L"
    run_with "$s" PLUMB_CUDA_PROFILE=1 timeout 60 "$(bin_of "$s")/plumb" bench --device cuda --model "$M" \
        --kv-dtype f16 --prompt-len "$P" --gen-len 1 --repetitions 1 2>&1 |
        grep -E "^[a-z_0-9]+ +[0-9]|CUDA profile|^pp" >>"$L"
done
cat "$L"
