#!/usr/bin/env bash
# Session 33, call D (call C trimmed to the device time left after three refused starts): main
# with try/s32's two winners landed (prefill products in clusters of two sharing x by default;
# split folds arriving by one acq_rel atomic) and stage_boundary on a capturable stream.
# row_invariance and conformance, stage_boundary, then bench-8b.sh's pp2048 / tg64 / depth 512
# and the concurrency run (1, 8, 32, 64). Stage: TESTS=0 tools/device/stage.sh, carry .gpu.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s33
mkdir -p $B && tar -xJf .gpu/stage-s33.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
PHASES="tests" TESTS="conformance row_invariance" bash tools/device/bench-8b.sh $B $OUT/bits >> $S 2>&1
echo "bits rc=$?" >> $S
wait
echo "## stage_boundary (one GPU, nothing else running)" >> $S
timeout 60 $B/stage_boundary 2000 >> $S 2>&1
echo "stage_boundary rc=$?" >> $S
PHASES="bench conc" bash tools/device/bench-8b.sh $B $OUT/bench >> $S 2>&1
echo "bench rc=$?" >> $S
cd $OUT && tar -cJf rest.tar.xz bits bench && rm -rf bits bench
