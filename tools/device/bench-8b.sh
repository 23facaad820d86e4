#!/usr/bin/env bash
# bench-8b.sh — issue 13's GPU figures from prebuilt binaries, in one call: plumb's GEMM against
# cuBLASLt at Llama-3.1-8B's shapes (with the copy bandwidth), the CUDA backend's tests, a
# Llama-3.1-8B-shape bf16 checkpoint from `plumb synth`, `plumb bench` (pp2048, tg64, depth 512,
# with the measured roofline) and `plumb bench --concurrency 1,8,32,64` with its plot.
#
#   tools/device/bench-8b.sh BIN_DIR OUT_DIR
#
# BIN_DIR: what tools/device/stage.sh writes, plus target/release/examples/gemm_8b. PHASES
# (default "tests gemm synth bench conc") picks phases, TESTS the test binaries, LEVELS and GEN_LEN
# the concurrency run, KV the KV cache's type (default f16, as every 8B figure of the README; plumb's
# own default, f32, runs the CUDA-core f32 attention: session 30's pp2048 11,480 against 27,924);
# the checkpoint goes to /tmp/l8b (16 GB).
set -u
B=${1:?usage: bench-8b.sh BIN_DIR OUT_DIR}
OUT=${2:?usage: bench-8b.sh BIN_DIR OUT_DIR}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PLUMB_REQUIRE_GPU=1
export PLUMB_HOME=${PLUMB_HOME:-/tmp/plumb-home}
bash "$(dirname "$0")/seed-kernels.sh" "$B"
PH=${PHASES:-tests gemm synth bench conc}
has() { [[ " $PH " == *" $1 "* ]]; }
status=0
if has tests; then
    for t in ${TESTS:-mma_probe compile conformance clusters row_invariance fused graphs pick memory}; do
        SECONDS=0
        timeout ${TEST_TIMEOUT:-300} "$B/$t" --nocapture --test-threads 1 >"$OUT/$t.log" 2>&1 || status=1
        echo "$t: $(grep 'test result' "$OUT/$t.log" | tail -1) (${SECONDS}s)"
    done
fi
if has gemm; then timeout 240 "$B/gemm_8b" "$OUT/gemm-8b.json" 2>&1 | tail -40 | tee "$OUT/gemm.log" || status=1; fi
if has synth && [ ! -e /tmp/l8b/config.json ]; then "$B/plumb" synth --arch llama-3.1-8b /tmp/l8b >"$OUT/synth.log" 2>&1 || status=1; fi
if has bench; then
    timeout 300 "$B/plumb" bench --device cuda --kv-dtype "${KV:-f16}" --model /tmp/l8b --prompt-len 2048 --gen-len 64 --depth 512 \
        --repetitions 2 --receipt "$OUT/bench-8b.json" 2>&1 | tail -6 || status=1
fi
if has conc; then
    timeout 300 "$B/plumb" bench --device cuda --kv-dtype "${KV:-f16}" --model /tmp/l8b --concurrency ${LEVELS:-1,8,32,64} --prompt-len 512 \
        --gen-len ${GEN_LEN:-256} --receipt "$OUT/conc-8b.json" --plot "$OUT/concurrency-cuda-8b.svg" 2>&1 | tail -8 || status=1
fi
exit $status
