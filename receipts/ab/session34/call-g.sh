#!/usr/bin/env bash
# Session 34, call G, on call F's warm machine: gemm_8b at M = 16 and 32 under the K splits over a
# cluster (call F had 1, 8 and 64), then session 33's call E on this build (main's default kernels):
# For the next device session, after call-c.sh on the warm machine: whether the prefill row tile
# choice (`tma::tma_kernel`: 128 or 192 rows by waves times TASK_COST_192 = 1.36, tuned before
# the clusters) still holds now that a pair of CTAs shares x. The 192-row tiles share more x; at
# 2,048 rows o and down (32 feature tiles) run 11 row tiles of 192 = 176 cluster tasks over 66
# cluster slots (2.7 waves), 16 of 128 = 256 tasks (3.9 waves). Also the clusters of four
# (PLUMB_CUDA_TMA_CLUSTER_PREFILL=4: two row tiles by two feature tiles, x and the weight tile each
# shared by a pair, 20 KB a stage from L2 against 28). gemm_8b at M = 2,048 and pp2048, main
# against 128-row tiles only (PLUMB_CUDA_TMA_ROWS=128) and against c4, two rounds alternating;
# the clusters test first (it runs c4 against one CTA each).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s34
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s34.tar.xz -C $B; }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
[ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1
for v in 0 2 4; do
  echo "## gemm_8b M = 16, 32, PLUMB_CUDA_TMA_KSPLIT=$v" >> $S
  PLUMB_CUDA_TMA_KSPLIT=$v GEMM_MS=16,32 GEMM_SHAPES=qkv,o,down,gate_up timeout 60 $B/gemm_8b $OUT/gemm-s$v.json 2>&1 \
    | grep -E "^(qkv|o |down|gate_up)" >> $S
done
for v in ROWS=192 ROWS=128 CLUSTER_PREFILL=4 CLUSTER_PREFILL=4 ROWS=128 ROWS=192; do
  echo "## gemm_8b M = 2,048, PLUMB_CUDA_TMA_$v" >> $S
  env PLUMB_CUDA_TMA_$v GEMM_MS=2048 timeout 60 $B/gemm_8b $OUT/gemm-$v.json 2>&1 | grep -E "^(qkv|o |down|gate_up)" >> $S
done
SETTINGS="main: r128:PLUMB_CUDA_TMA_ROWS=128 c4:PLUMB_CUDA_TMA_CLUSTER_PREFILL=4" PHASES="prefill" timeout 280 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz ab && rm -rf ab
