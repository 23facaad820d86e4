#!/usr/bin/env bash
# smol-calls.sh — the default model's A/B of builds, with llama.cpp in the same run, in the two
# device calls its size needs (the tree and its carry travel at most 64 MiB a call; the model's
# xz halves are 41 and 49 MB: tools/device/model-parts.sh). Session 21's calls C and D
# (receipts/ab-cuda-session21.txt) as one script. Here, before call 1:
#
#   NVRTC_LIB_DIR=... TESTS=0 tools/device/stage.sh /tmp/stage-X; cp /tmp/stage-X.tar.xz .gpu/
#   (optional) llama-cpp-python==0.3.36's sdist, vendor/llama.cpp stripped of models, docs,
#   media, benches, tools/ui and the ggml backends but cpu and cuda: tar -cJf .gpu/llama-src.tar.xz
#   move fixtures/ out of the tree (and receipts/ if the carry is near 64 MiB)
#
#   call 1: STAGES="main:stage-21 new:stage-22" bash tools/device/smol-calls.sh 1
#           carry .gpu/stage-*.tar.xz, .gpu/m1 (and .gpu/llama-src.tar.xz)
#   call 2: STAGES="main:stage-21 new:stage-22" bash tools/device/smol-calls.sh 2
#           carry .gpu/m2, with fixtures/smollm2 back in the tree (plumb check reads it)
#
# Call 2 must follow call 1 within the machine's idle time (30 s): it finds call 1's binaries,
# model half and llama.cpp build under /tmp. STAGES: TAG:NAME pairs, .gpu/NAME.tar.xz unpacked
# to /tmp/smol-TAG; the last is the build under test: its bit tests run in call 1, its
# `plumb check` and the llama.cpp comparison in call 2. Call 1 builds llama-bench in the
# background while the tests run and waits for it until DEADLINE seconds (default 540); call 2
# finishes a build that ran out of time. Call 2: `ab-smol.sh` over the stages (ROUNDS, default 2:
# pp512, tg128, depth 512 with receipts, each setting's decode kernels event-timed), the
# peer's bench phase (peer-llamacpp-cuda.sh) with the last stage's plumb, every kernel of its
# pp512, then `plumb check --device cuda`. Output under $OUT/smol-1 and $OUT/smol-2, tarred.
set -u
S=$(date +%s)
here=$(dirname "$0")
read -r -a ST <<<"${STAGES:?STAGES=\"TAG:NAME ...\" (.gpu/NAME.tar.xz)}"
last=${ST[-1]%%:*}
B=/tmp/smol-$last
work=/tmp/plumb-peer-cuda
# shellcheck source=tools/device/settings.sh
source "$here/settings.sh"
gpu_env
left() { echo $((${DEADLINE:-540} - ($(date +%s) - S))); }
case "${1:?usage: smol-calls.sh 1|2}" in
1)
    O=$OUT/smol-1
    mkdir -p "$O" /tmp/smol-model
    for s in "${ST[@]}"; do
        rm -rf "/tmp/smol-${s%%:*}" && mkdir -p "/tmp/smol-${s%%:*}"
        tar -xJf ".gpu/${s#*:}.tar.xz" -C "/tmp/smol-${s%%:*}" || exit 1
    done
    cp .gpu/m1/part /tmp/smol-model/part1
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee "$O/env.txt"
    build=
    if [ -f .gpu/llama-src.tar.xz ]; then
        mkdir -p "$work" && tar -xJf .gpu/llama-src.tar.xz -C "$work"
        (
            cmake -S "$work/llama.cpp" -B "$work/llama.cpp/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
                -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
                -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF
            cmake --build "$work/llama.cpp/build" -j"$(nproc)" --target llama-bench
        ) >"$O/llama-build.log" 2>&1 &
        build=$!
    fi
    bash "$here/seed-kernels.sh" $(for s in "${ST[@]}"; do echo "/tmp/smol-${s%%:*}"; done)
    for t in ${TESTS:-row_invariance fused conformance graphs pick memory}; do
        SECONDS=0
        timeout 200 "$B/$t" --test-threads 1 >"$O/$t.log" 2>&1
        echo "$t rc=$? ${SECONDS}s $(grep 'test result' "$O/$t.log" | tail -1)" | tee -a "$O/tests.txt"
    done
    grep -E "panicked|differs" "$O"/*.log | head -5
    if [ -n "$build" ]; then
        while kill -0 "$build" 2>/dev/null && [ "$(left)" -gt 5 ]; do sleep 5; done
        kill -0 "$build" 2>/dev/null && echo "llama.cpp still building: call 2 finishes it" || tail -1 "$O/llama-build.log"
    fi
    ;;
2)
    O=$OUT/smol-2
    mkdir -p "$O"
    settings=$(for s in "${ST[@]}"; do echo -n "${s%%:*}:BIN=/tmp/smol-${s%%:*} "; done)
    SETTINGS=$settings ROUNDS=${ROUNDS:-2} timeout $(($(left) - 300)) \
        bash "$here/ab-smol.sh" "$B" "$O/ab" /tmp/smol-model/part1 .gpu/m2/part
    echo "ab rc=$? at $(($(date +%s) - S))s"
    M=$PLUMB_HOME/models/SmolLM2-135M-Instruct.Q4_1.gguf
    mkdir -p "$PLUMB_HOME/models" && ln -sf /tmp/smol-model/smollm2.gguf "$M"
    if [ -d "$work/llama.cpp/build" ]; then
        mkdir -p "$O/peer"
        OUT=$O/peer WORK=$work MODEL=/tmp/smol-model/smollm2.gguf PLUMB=$B/plumb REPS=${REPS:-5} PHASE=bench \
            timeout $(($(left) - 200)) bash "$here/peer-llamacpp-cuda.sh" 2>&1 | tail -4
    fi
    echo "## [$last] every kernel of a pp512 (PLUMB_CUDA_PROFILE=1)" >"$O/prefill-profile.txt"
    PLUMB_CUDA_PROFILE=1 timeout 30 "$B/plumb" bench --device cuda --model "$M" --kv-dtype f16 --prompt-len 512 \
        --gen-len 1 --depth 0 --repetitions 1 2>&1 | grep -E "^[a-z_0-9]+ +[0-9]|CUDA profile|^pp" >>"$O/prefill-profile.txt"
    SECONDS=0
    timeout $(($(left) - 8)) "$B/plumb" check --device cuda --model "$M" --receipt "$O/check-cuda.json" >"$O/check.log" 2>&1
    echo "check rc=$? ${SECONDS}s"
    grep -E "^all:|passed|failed" "$O/check.log" | tail -3
    ;;
*)
    echo "usage: smol-calls.sh 1|2" >&2
    exit 2
    ;;
esac
echo "call $1: $(($(date +%s) - S))s"
tar -cf "$OUT/smol-$1.tar" -C "$OUT" "smol-$1" && rm -rf "${OUT:?}/smol-$1"
