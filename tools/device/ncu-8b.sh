#!/usr/bin/env bash
# ncu-8b.sh — Nsight Compute's view of the 8B's 64-row decode kernels (tensor-core attention and
# the TMA linear), for what a timer cannot say: stall reasons, achieved bandwidth and occupancy.
#
#   tools/device/ncu-8b.sh BIN_DIR OUT_DIR [MODEL_DIR]
#
# BIN_DIR holds `plumb` (tools/device/stage.sh); MODEL_DIR defaults to /tmp/l8b, written by
# `plumb synth --arch llama-3.1-8b` when missing. Runs a 64-request bench without graphs (each
# kernel a plain launch) under ncu, skipping the prompts' prefill (SKIP launches of the matching
# kernels, default 3,000; 160 match a 64-row step) and profiling COUNT (default 8) of them with the full section set,
# clocks left alone (H200.md). Writes OUT_DIR/ncu.ncu-rep and its details page as text.
# KERNELS is ncu's -k filter (default: the attention and the 64-row linear instances); CONC the
# requests decoding at once (default 64). SKIP counts only the launches the filter matches. Before
# the level's prompts `plumb bench` runs a warm-up round and two calibration rounds of one-token
# prompts (~36 steps), so for the one-request walk at ~530 positions: CONC=1
# KERNELS=regex:attention_mma SKIP=2000 COUNT=2 (32 launches a step; SKIP=200 lands in the
# calibration, one tile a walk); its 8-row linears (129 a step): KERNELS=regex:linear_tma_bf16_n8
# SKIP=7000 COUNT=5, one layer's q|k|v, o, gate|up and down. The default model's LM head:
# CONC=1 KERNELS=regex:linear_split_q8_0 SKIP=40 COUNT=4 with /tmp/m/smollm2.gguf as MODEL_DIR (one launch
# a step; the f16 KV cache as for the 8B).
set -u
B=${1:?usage: ncu-8b.sh BIN_DIR OUT_DIR [MODEL_DIR]}
OUT=${2:?usage: ncu-8b.sh BIN_DIR OUT_DIR [MODEL_DIR]}
MODEL=${3:-/tmp/l8b}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PLUMB_HOME=${PLUMB_HOME:-/tmp/plumb-home} PLUMB_CUDA_GRAPHS=0
bash "$(dirname "$0")/seed-kernels.sh" "$B"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
# A .gguf file (the default model, rebuilt from its halves) is taken as it is.
[ -f "$MODEL" ] || [ -e "$MODEL/config.json" ] || "$B/plumb" synth --arch llama-3.1-8b "$MODEL" >/dev/null
"$NCU" --clock-control none --target-processes all -k "${KERNELS:-regex:attention_mma|linear_tma_bf16_n64}" \
    --launch-skip "${SKIP:-3000}" --launch-count "${COUNT:-8}" --set full -f -o "$OUT/ncu" \
    "$B/plumb" bench --device cuda --kv-dtype f16 --model "$MODEL" --concurrency "${CONC:-64}" --prompt-len 512 --gen-len 64 \
    >"$OUT/ncu-run.log" 2>&1
status=$?
"$NCU" --import "$OUT/ncu.ncu-rep" --page details >"$OUT/ncu-details.txt" 2>&1 || status=1
tail -5 "$OUT/ncu-run.log"
grep -E "^  [a-z_0-9]+|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued" "$OUT/ncu-details.txt" | head -80
exit $status
