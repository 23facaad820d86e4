#!/usr/bin/env bash
# Next session, call C (written in session 33; stage main first: the tarball holds the new
# `clusters` test binary): main with try/s32's two winners landed (prefill products in clusters of two
# sharing x, on by default; split folds arriving by one acq_rel atomic) and stage_boundary on a
# capturable stream. The backend's bit tests, then stage_boundary (after the synth is done, so the
# CPU is idle for the eager launches), then bench-8b.sh's pp2048 / tg64 / depth 512 and the
# concurrency run (1, 8, 32, 64) for the README. Stage: TESTS=0 tools/device/stage.sh, carry .gpu.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s33
mkdir -p $B && tar -xJf .gpu/stage-s33.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
PHASES="tests" TESTS="compile conformance clusters row_invariance fused graphs pick memory" bash tools/device/bench-8b.sh $B $OUT/bits >> $S 2>&1
echo "bits rc=$?" >> $S
wait
echo "## stage_boundary (one GPU, nothing else running)" >> $S
timeout 90 $B/stage_boundary 2000 >> $S 2>&1
echo "stage_boundary rc=$?" >> $S
PHASES="bench conc" bash tools/device/bench-8b.sh $B $OUT/bench >> $S 2>&1
echo "bench rc=$?" >> $S
echo "## pp2048 with the prefill clusters off (PLUMB_CUDA_TMA_CLUSTER_PREFILL=0), then on again" >> $S
for c in 0 1; do
  PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c timeout 60 $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 \
    --gen-len 1 --repetitions 3 --receipt $OUT/pp-c$c.json 2>&1 | grep -E "^pp" | sed "s/^/[c$c] /" >> $S
done
cd $OUT && tar -cJf rest.tar.xz bits bench && rm -rf bits bench
