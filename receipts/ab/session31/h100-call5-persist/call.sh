#!/usr/bin/env bash
# Session 31 call 5: call 4 had the prefill products faster on a grid of a block per task
# (PLUMB_CUDA_TMA_PERSIST=0) than on the persistent grid (gate|up 880.6 against 943.8 us at
# M = 2,048). pp2048 both ways, two rounds alternating (main's kernels: the try/s31-c2 stage, its
# clusters off), and gemm_8b at M = 512 and 2,048 both ways.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/c2
mkdir -p $B && tar -xJf .gpu/stage-c2.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B > /dev/null 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
for p in 1 0; do
  echo "## gemm_8b, PLUMB_CUDA_TMA_PERSIST=$p" >> $S
  PLUMB_CUDA_TMA_PERSIST=$p GEMM_MS=512,2048 timeout 60 $B/gemm_8b $OUT/gemm-p$p.json 2>&1 | grep -E "^(qkv|o |down|gate_up)" >> $S
done
wait
SETTINGS="p1: p0:PLUMB_CUDA_TMA_PERSIST=0" PHASES="prefill" timeout 200 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz ab && rm -rf ab
