#!/usr/bin/env bash
# Session 29 call 3: the interleaved GLU on the 128-row tile (fewer accumulators, fewer spills) against the products and silu_mul on it, event-timed in one prefill.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/c
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s29.tar.xz -C $B; }
[ -x /tmp/m/plumb ] || { mkdir -p /tmp/m && tar -xJf .gpu/stage-m.tar.xz -C /tmp/m; }
S=$OUT/summary.txt
SETTINGS="gli128:PLUMB_CUDA_TMA_ROWS=128 nogli128:PLUMB_CUDA_TMA_ROWS=128,PLUMB_CUDA_TMA_GLI=0" PHASES="profile" ROUNDS=1 KERNELS="linear_tma_bf16_n1[29]|silu|attention_wgmma" timeout 250 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -v "n8\|n16" $OUT/ab/ab.txt >> $S
rm -f $OUT/ab/profile-decode-*
