#!/usr/bin/env bash
# gpu-run.sh — everything that belongs together on a GPU machine, from prebuilt binaries (the
# GPU machine may have no Rust toolchain): the CUDA backend's tests, `plumb check --device cuda`
# and a short `plumb bench --device cuda`, with logs and receipts in one output folder.
#
#   tools/device/gpu-run.sh BIN_DIR OUT_DIR [MODEL.gguf]
#
# BIN_DIR holds `plumb` and the test binaries tools/device/stage.sh copies: the CUDA backend's
# (compile, conformance, row_invariance, fused, graphs, pick, memory, timeline), the engine's GPU tests
# (lanes_parity_cuda, picks_cuda, drafts_cuda) and the server's (server_*, built to serve on the
# GPU). Without MODEL (the default model's .gguf) only the backend's tests run.
# PHASES (default "env tests parity check bench") picks phases;
# CHECK_ARGS adds arguments to plumb check (e.g. --quick). Run it from the repository root, so
# plumb check finds fixtures/smollm2. Exit status: non-zero if any phase failed.
set -uo pipefail
BIN=${1:?usage: gpu-run.sh BIN_DIR OUT_DIR [MODEL.gguf]}
OUT=${2:?usage: gpu-run.sh BIN_DIR OUT_DIR [MODEL.gguf]}
MODEL=${3:-}
PHASES=${PHASES:-env tests parity check bench}
mkdir -p "$OUT"
export PLUMB_HOME=${PLUMB_HOME:-$(mktemp -d /tmp/plumb-home.XXXX)}
bash "$(dirname "$0")/seed-kernels.sh" "$BIN"
# The default model goes into plumb's cache under its own name, and every phase uses that path:
# the engine's and server's tests find it there, and plumb check matches the transformers
# fixtures (fixtures/smollm2) to a model by its file name.
if [ -n "$MODEL" ]; then
    # A file cut short on its way here (a decompression stopped by a time limit) would fail every
    # test that loads it; say so once instead.
    # shellcheck source=tools/device/default-model.sh
    source "$(dirname "$0")/default-model.sh"
    echo "$DEFAULT_MODEL_SHA256  $MODEL" | sha256sum -c --quiet - 2>/dev/null ||
        { echo "gpu-run: $MODEL is not the default model's file (its sha256 differs: cut short, or another file)"; exit 1; }
    mkdir -p "$PLUMB_HOME/models"
    ln -sf "$(realpath "$MODEL")" "$PLUMB_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf"
    MODEL=$PLUMB_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
fi
# NVRTC is loaded at run time: make the toolkit's copy findable wherever it is installed.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
# The GPU tests must not pass by skipping.
export PLUMB_REQUIRE_GPU=1
status=0
phase() { echo "== $1 ($(date -u +%H:%M:%S))"; }
has() { [[ " $PHASES " == *" $1 "* ]]; }

if has env; then
    phase env
    {
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
        ldconfig -p | grep -E 'libcuda\.so|libnvrtc' || true
        ls /usr/local/cuda/lib64/libnvrtc* 2>/dev/null || true
        uname -a
        nproc
    } 2>&1 | tee "$OUT/env.log"
fi

if has tests; then
    phase tests
    for t in compile conformance row_invariance fused graphs pick memory timeline; do
        echo "-- $t"
        SECONDS=0
        if ! "$BIN/$t" --nocapture --test-threads 1; then status=1; echo "FAILED: $t"; fi
        echo "-- $t took ${SECONDS}s"
    done 2>&1 | tee "$OUT/tests.log"
    grep -q '^FAILED' "$OUT/tests.log" && status=1
fi

if [ -n "$MODEL" ] && has parity; then
    phase parity
    for t in lanes_parity_cuda picks_cuda drafts_cuda server_errors server_load server_model_defaults server_fuzz_json; do
        [ -x "$BIN/$t" ] || { echo "FAILED: $t is not staged"; continue; }
        echo "-- $t"
        SECONDS=0
        if ! "$BIN/$t" --test-threads 1; then status=1; echo "FAILED: $t"; fi
        echo "-- $t took ${SECONDS}s"
    done 2>&1 | tee "$OUT/parity.log"
    grep -q '^FAILED' "$OUT/parity.log" && status=1
fi

if [ -n "$MODEL" ] && has check; then
    phase check
    SECONDS=0
    # shellcheck disable=SC2086
    "$BIN/plumb" check --device cuda --model "$MODEL" --receipt "$OUT/check-cuda.json" ${CHECK_ARGS:-} 2>&1 | tee "$OUT/check.log" || status=1
    echo "check took ${SECONDS}s" | tee -a "$OUT/check.log"
fi

if [ -n "$MODEL" ] && has bench; then
    phase bench
    # The binary's gate table may predate this run's check: name the family for these runs.
    export PLUMB_EXPERIMENTAL=${PLUMB_EXPERIMENTAL:-llama}
    {
        "$BIN/plumb" bench --device cuda --model "$MODEL" --repetitions 3 --receipt "$OUT/bench-cuda.json" || status=1
        "$BIN/plumb" bench --device cuda --model "$MODEL" --concurrency 1,8 --prompt-len 128 --gen-len 128 \
            --receipt "$OUT/bench-concurrency-cuda.json" || status=1
        "$BIN/plumb" run --device cuda --model "$MODEL" --temperature 0 -n 24 "What is the capital of France?" || status=1
    } 2>&1 | tee "$OUT/bench.log"
fi
phase "done (status $status)"
exit $status
