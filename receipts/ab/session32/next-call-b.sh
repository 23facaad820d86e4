#!/usr/bin/env bash
# For the next device session, call B of two (after next-call-a.sh, on the warm machine: the stage
# is unpacked and /tmp/l8b made; a fresh machine makes them again). try/s32's switches at 64
# concurrent requests (the 64-row clusters, acq_rel folds) against main's kernels, two rounds
# alternating; tg64 / depth 512 under main's softmax and the mask-free one (its decode walks), two
# rounds alternating; then the mask-free softmax's attention launches event-timed in one request's decode
# and a 2,048-token prefill; then examples/stage_boundary (a kernel boundary against a grid
# barrier: whether a persistent decode kernel would pay for the default model's ~215 launches).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s32
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s32.tar.xz -C $B; }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
SETTINGS="main: c64:PLUMB_CUDA_TMA_CLUSTER=1 acq:PLUMB_CUDA_FOLD=acq_rel" PHASES="conc" LEVELS=64 timeout 250 bash tools/device/ab-8b.sh $B $OUT/abc > $OUT/abc.log 2>&1
echo "abc rc=$?" >> $S
grep -vE "^\(" $OUT/abc/ab.txt >> $S
SETTINGS="main: nm:PLUMB_CUDA_ATT_NOMASK=1" PHASES="tg" timeout 150 bash tools/device/ab-8b.sh $B $OUT/abt > $OUT/abt.log 2>&1
echo "abt rc=$?" >> $S
grep -E "^(##|pp|tg)" $OUT/abt/ab.txt >> $S
SETTINGS="main: nm:PLUMB_CUDA_ATT_NOMASK=1" PHASES="profile" ROUNDS=1 KERNELS="attention_" timeout 150 bash tools/device/ab-8b.sh $B $OUT/abp > $OUT/abp.log 2>&1
echo "abp rc=$?" >> $S
grep -vE "^\(" $OUT/abp/ab.txt >> $S
echo "## stage_boundary (one GPU, nothing else running)" >> $S
timeout 60 $B/stage_boundary 2000 >> $S 2>&1
echo "stage_boundary rc=$?" >> $S
cd $OUT && tar -cJf rest.tar.xz abc abt abp && rm -rf abc abt abp
