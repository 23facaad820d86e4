#!/usr/bin/env bash
# ab-8b.sh — one device call's A/B of backend settings on the Llama-3.1-8B shape: the CUDA
# backend's bit tests under each setting, then for each setting in turn plumb's GEMMs against
# cuBLASLt (gemm_8b), `plumb bench --concurrency` and one request's pp/tg, the whole round twice
# in alternating order (A B, then B A) so drift between runs shows as a spread, not a verdict.
#
#   SETTINGS="new: old:PLUMB_CUDA_KC_LONG_FROM=1000000000" tools/device/ab-8b.sh BIN_DIR OUT_DIR
#
# SETTINGS: space-separated TAG:ASSIGNMENTS, the assignments comma-separated VAR=VALUE (none: the
# defaults); BIN=DIR among them runs that setting's binaries from DIR instead of BIN_DIR, for an
# A/B of two builds: SETTINGS="main: trims:BIN=/tmp/b2". BIN_DIR: what tools/device/stage.sh
# writes (plumb, gemm_8b, the test binaries). Each build compiles its kernels once before any
# timed run. PACK=1 ends by packing OUT_DIR into OUT_DIR.tar (the device tool returns at most
# eight files).
# PHASES (default "tests gemm conc tg") picks phases ("gate": each setting's `plumb check --quick`
# on a 4-layer Llama-3.2-1B-shape bf16 synth, /tmp/l1b, with a 16-bit KV cache, within
# GATE_TIMEOUT seconds (default 300; the whole-model gate passed 120 s there in session 22);
# "timeline": each setting's per-block timeline of eight decode steps at depth 512
# (PLUMB_CUDA_TIMELINE, the time-stamped kernels: stage with TIMELINE=1 to skip NVRTC) and
# tools/device/timeline.py's table of it and of its fourth step, launch by launch;
# "prefill": a PREFILL_LEN-token prompt's prefill (default 2,048), three repetitions;
# "long": tg64 at depth LONG_DEPTH, default
# 4,096; "profile": the kernels matching KERNELS, default attention, event-timed in one request's
# decode and in a 2,048-token prefill, for a change smaller than an end-to-end run's spread); TESTS the test binaries (default
# row_invariance fused conformance graphs); GEMM_MS and GEMM_SHAPES the GEMM rows and shapes; LEVELS the
# concurrency levels (default 32,64) and GEN_LEN their generated tokens (default 256); ROUNDS 1 or
# 2 (default 2). The checkpoint goes to /tmp/l8b
# (16 GB, made once by `plumb synth`). Writes OUT_DIR/ab.txt (every figure, tagged) and each run's
# receipt; exits non-zero when a test failed.
set -u
B=${1:?usage: ab-8b.sh BIN_DIR OUT_DIR}
OUT=${2:?usage: ab-8b.sh BIN_DIR OUT_DIR}
read -r -a SET <<<"${SETTINGS:?SETTINGS=\"TAG:VAR=VALUE,... TAG:...\"}"
mkdir -p "$OUT"
L=$OUT/ab.txt
# tag_of, env_of, bin_of, run_with, gpu_env, reversed
# shellcheck source=tools/device/settings.sh
source "$(dirname "$0")/settings.sh"
gpu_env
PH=${PHASES:-tests gemm conc tg}
has() { [[ " $PH " == *" $1 "* ]]; }
status=0

bash "$(dirname "$0")/seed-kernels.sh" "$B" $(for s in "${SET[@]}"; do bin_of "$s"; done)

if has conc || has tg || has prefill || has long || has profile || has timeline; then
    ([ -e /tmp/l8b/config.json ] || "$B/plumb" synth --arch llama-3.1-8b -t 8 /tmp/l8b >"$OUT/synth.log" 2>&1) &
    synth=$!
fi
if has tests; then
    for s in "${SET[@]}"; do
        for t in ${TESTS:-row_invariance fused conformance graphs}; do
            SECONDS=0
            run_with "$s" timeout "${TEST_TIMEOUT:-200}" "$(bin_of "$s")/$t" --test-threads 1 >"$OUT/$t-$(tag_of "$s").log" 2>&1
            rc=$?
            [ $rc = 0 ] || status=1
            echo "[$(tag_of "$s")] $t rc=$rc ${SECONDS}s $(grep 'test result' "$OUT/$t-$(tag_of "$s").log" | tail -1)" >>"$L"
        done
    done
fi
[ -n "${synth:-}" ] && { wait "$synth" || status=1; }
if has gate; then
    [ -e /tmp/l1b/config.json ] || "$B/plumb" synth --arch llama-3.2-1b --layers 4 /tmp/l1b >"$OUT/synth-l1b.log" 2>&1
    for s in "${SET[@]}"; do
        SECONDS=0
        run_with "$s" timeout "${GATE_TIMEOUT:-300}" "$(bin_of "$s")/plumb" check --device cuda --kv-dtype f16 \
            --model /tmp/l1b --quick --receipt "$OUT/check-$(tag_of "$s").json" >"$OUT/check-$(tag_of "$s").log" 2>&1
        rc=$?
        [ $rc = 0 ] || status=1
        echo "[$(tag_of "$s")] plumb check --quick (l1b, f16 KV) rc=$rc ${SECONDS}s" >>"$L"
        grep -E "^all:|residency|pass$|FAIL" "$OUT/check-$(tag_of "$s").log" | tail -4 >>"$L"
    done
fi
# Every build compiles its kernels (NVRTC, about a minute the first time) before any timed run.
if has conc || has tg || has prefill || has long || has profile || has timeline; then
    for d in $(for s in "${SET[@]}"; do bin_of "$s"; done | sort -u); do
        timeout 200 "$d/plumb" bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 16 --gen-len 4 \
            --depth 0 --repetitions 1 >/dev/null 2>&1 &
    done
    wait
fi
order=("${SET[@]}")
for round in $(seq 1 "${ROUNDS:-2}"); do
    for s in "${order[@]}"; do
        tag=$(tag_of "$s")
        P=("$(bin_of "$s")/plumb" bench --device cuda --kv-dtype f16 --model /tmp/l8b)
        if has gemm; then
            SECONDS=0
            echo "## [$tag] gemm_8b (round $round)" >>"$L"
            run_with "$s" GEMM_MS="${GEMM_MS:-1,8,16,32,64}" GEMM_SHAPES="${GEMM_SHAPES:-qkv,o,down,gate_up}" \
                timeout 200 "$(bin_of "$s")/gemm_8b" "$OUT/gemm-$tag-$round.json" 2>&1 | grep -E "^(qkv|o |down|gate_up|head)" >>"$L"
            echo "($SECONDS s)" >>"$L"
        fi
        if has conc; then
            SECONDS=0
            echo "## [$tag] concurrency ${LEVELS:-32,64} (round $round)" >>"$L"
            run_with "$s" timeout 200 "${P[@]}" --concurrency "${LEVELS:-32,64}" --prompt-len 512 --gen-len "${GEN_LEN:-256}" \
                --receipt "$OUT/conc-$tag-$round.json" 2>&1 | grep concurrent >>"$L"
            echo "($SECONDS s)" >>"$L"
        fi
        if has tg; then
            SECONDS=0
            echo "## [$tag] pp512, tg64, depth 512 (round $round)" >>"$L"
            run_with "$s" timeout 150 "${P[@]}" --prompt-len 512 --gen-len 64 --depth 512 --repetitions 2 \
                --receipt "$OUT/tg-$tag-$round.json" 2>&1 | grep -E "^(pp|tg)" >>"$L"
            echo "($SECONDS s)" >>"$L"
        fi
        if has prefill; then
            SECONDS=0
            echo "## [$tag] pp${PREFILL_LEN:-2048} (round $round)" >>"$L"
            run_with "$s" timeout 150 "${P[@]}" --prompt-len "${PREFILL_LEN:-2048}" --gen-len 2 --depth 0 --repetitions 3 \
                --receipt "$OUT/pp-$tag-$round.json" 2>&1 | grep -E "^(pp|roofline)" >>"$L"
            echo "($SECONDS s)" >>"$L"
        fi
        if has profile; then
            SECONDS=0
            echo "## [$tag] event-timed kernels matching ${KERNELS:-attention}: one request's decode, a 2,048-token prefill (round $round)" >>"$L"
            run_with "$s" PLUMB_CUDA_PROFILE=decode timeout 60 "${P[@]}" --prompt-len 512 --gen-len 64 --depth 0 \
                --repetitions 1 >"$OUT/profile-decode-$tag-$round.txt" 2>&1
            run_with "$s" PLUMB_CUDA_PROFILE=1 timeout 60 "${P[@]}" --prompt-len 2048 --gen-len 2 --depth 0 \
                --repetitions 1 >"$OUT/profile-prefill-$tag-$round.txt" 2>&1
            grep -hE "${KERNELS:-attention}" "$OUT/profile-decode-$tag-$round.txt" "$OUT/profile-prefill-$tag-$round.txt" >>"$L"
            echo "($SECONDS s)" >>"$L"
        fi
        if has timeline; then
            SECONDS=0
            echo "## [$tag] timeline of decode steps 100-107, depth 512 (round $round)" >>"$L"
            run_with "$s" PLUMB_CUDA_TIMELINE="$OUT/tl-$tag-$round.csv" PLUMB_CUDA_TIMELINE_STEPS=100:8 timeout 90 "${P[@]}" \
                --prompt-len 512 --gen-len 64 --depth 512 --repetitions 2 >"$OUT/tl-bench-$tag-$round.log" 2>&1
            python3 "$(dirname "$0")/timeline.py" "$OUT/tl-$tag-$round.csv" --steps 8 >"$OUT/tl-$tag-$round.txt" 2>&1
            python3 "$(dirname "$0")/timeline.py" "$OUT/tl-$tag-$round.csv" --steps 8 --list 3 \
                >"$OUT/tl-$tag-$round-step3.txt" 2>&1
            head -12 "$OUT/tl-$tag-$round.txt" >>"$L"
            xz -T4 "$OUT/tl-$tag-$round.csv"
            echo "($SECONDS s)" >>"$L"
        fi
        if has long; then
            SECONDS=0
            echo "## [$tag] tg64 at depth ${LONG_DEPTH:-4096} (round $round)" >>"$L"
            run_with "$s" timeout 150 "${P[@]}" --prompt-len 512 --gen-len 64 --depth "${LONG_DEPTH:-4096}" \
                --repetitions 1 --receipt "$OUT/long-$tag-$round.json" 2>&1 | grep -E "^tg" >>"$L"
            echo "($SECONDS s)" >>"$L"
        fi
    done
    # The next round runs the settings in reverse order.
    mapfile -t order < <(reversed "${order[@]}")
done
cat "$L"
if [ "${PACK:-0}" = 1 ]; then
    tar -cf "$OUT.tar" -C "$(dirname "$OUT")" "$(basename "$OUT")" && rm -rf "$OUT"
fi
exit $status
