#!/usr/bin/env bash
# For the next device session: try/s31-c2 with its barrier fix (the consumers' arrival on the
# peer's empty barrier without .release.cluster, which compiled to MEMBAR.ALL.GPU a stage and warp).
# Stage: git checkout try/s31-c2 && NVRTC_LIB_DIR=/tmp/nvrtc130/nvidia/cu13/lib TESTS=0 \
#   tools/device/stage.sh /tmp/stage-c2b   (then copy /tmp/stage-c2b.tar.xz to .gpu/ and carry .gpu)
# Bits first (row_invariance runs the 64-row and the prefill clusters against the unclustered
# launches, fused the clustered GLU), then gemm_8b both ways at M = 64 (PLUMB_CUDA_TMA_CLUSTER) and
# 2,048 (PLUMB_CUDA_TMA_CLUSTER_PREFILL), then pp2048 and 64 requests both ways, two rounds.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/c2b
mkdir -p $B && tar -xJf .gpu/stage-c2b.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B > /dev/null 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
# The bit tests, as ab-8b.sh's tests phase runs them (its ab.txt gives each one's result line).
SETTINGS="bits:" PHASES="tests" TESTS="row_invariance fused conformance graphs" timeout 300 bash tools/device/ab-8b.sh $B $OUT/bits > $OUT/bits.log 2>&1
echo "bits rc=$?" >> $S
cat $OUT/bits/ab.txt >> $S
for c in 0 1; do
  echo "## gemm_8b, clusters $c (M = 64: PLUMB_CUDA_TMA_CLUSTER, M = 2,048: PLUMB_CUDA_TMA_CLUSTER_PREFILL)" >> $S
  PLUMB_CUDA_TMA_CLUSTER=$c PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c GEMM_MS=64,2048 timeout 90 $B/gemm_8b $OUT/gemm-c$c.json 2>&1 | grep -E "^(qkv|o |down|gate_up)" >> $S
done
wait
SETTINGS="main: c2:PLUMB_CUDA_TMA_CLUSTER_PREFILL=1" PHASES="prefill" timeout 200 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
SETTINGS="main: c64:PLUMB_CUDA_TMA_CLUSTER=1" PHASES="conc" LEVELS=64 timeout 240 bash tools/device/ab-8b.sh $B $OUT/abc > $OUT/abc.log 2>&1
echo "abc rc=$?" >> $S
grep -vE "^\(" $OUT/abc/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz bits ab abc && rm -rf bits ab abc
