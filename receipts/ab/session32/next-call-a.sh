#!/usr/bin/env bash
# For the next device session, call A of two: try/s32 (`s32.diff` here, made on main at 09098ae;
# it applies to any later main whose code is unchanged), one build with three changes behind
# switches, each off by default (the default build's SASS is main's but for the 64-row clusters'
# arrive and two linear_tile register allocations):
#   - PLUMB_CUDA_TMA_CLUSTER_PREFILL=1 (and PLUMB_CUDA_TMA_CLUSTER=1 at 33-64 rows): products in
#     clusters of two sharing x by TMA multicast, the remote arrival without .release.cluster
#     (session 31: half speed with it, a MEMBAR.ALL.GPU a stage and warp);
#   - PLUMB_CUDA_ATT_NOMASK=1: the tensor-core attention's softmax without masks on tiles whole
#     for every pair of a warp (prefill walks on wgmma; decode and prefill walks on mma.sync);
#   - PLUMB_CUDA_FOLD=acq_rel: split folds arrive by thread 0's acq_rel atomic after the block's
#     barrier, not a fence.sc.gpu by every thread before and after.
# Stage (about 20 minutes here: the build, then four kernel builds):
#   git worktree add --detach /tmp/wt-s32 main && git -C /tmp/wt-s32 apply "$PWD/receipts/ab/session32/s32.diff"
#   cd /tmp/wt-s32 && NVRTC_LIB_DIR=/tmp/nvrtc130/nvidia/cu13/lib TESTS=0 CARGO_TARGET_DIR=/work/main/target \
#     VARIANTS="PLUMB_CUDA_ATT_NOMASK=1 PLUMB_CUDA_FOLD=acq_rel PLUMB_CUDA_ATT_NOMASK=1,PLUMB_CUDA_FOLD=acq_rel" \
#     bash tools/device/stage.sh /tmp/stage-s32 && mkdir -p /work/main/.gpu && cp /tmp/stage-s32.tar.xz /work/main/.gpu/
# then run this with carry [".gpu"]; call B (next-call-b.sh) right after, on the warm machine.
# Bits first, every switch on (row_invariance compares the clustered launches with the unclustered
# ones itself, the prefill-chunk test the wgmma walk with mma.sync and each row alone, and the split
# folds of the decode rows and the long-K products with each row alone); then gemm_8b both ways
# at M = 64 and 2,048; then pp2048 under main's kernels, the prefill clusters and the mask-free
# softmax, and tg64 / depth 512 under main's folds and acq_rel's, two rounds alternating
# (about 450 s in all).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s32
mkdir -p $B && tar -xJf .gpu/stage-s32.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
ON=PLUMB_CUDA_ATT_NOMASK=1,PLUMB_CUDA_FOLD=acq_rel,PLUMB_CUDA_TMA_CLUSTER=1,PLUMB_CUDA_TMA_CLUSTER_PREFILL=1
SETTINGS="on:$ON" PHASES="tests" TESTS="row_invariance fused conformance graphs" timeout 240 bash tools/device/ab-8b.sh $B $OUT/bits > $OUT/bits.log 2>&1
echo "bits rc=$?" >> $S
cat $OUT/bits/ab.txt >> $S
for c in 0 1; do
  echo "## gemm_8b, clusters $c (M = 64: PLUMB_CUDA_TMA_CLUSTER, M = 2,048: PLUMB_CUDA_TMA_CLUSTER_PREFILL)" >> $S
  PLUMB_CUDA_TMA_CLUSTER=$c PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c GEMM_MS=64,2048 timeout 60 $B/gemm_8b $OUT/gemm-c$c.json 2>&1 | grep -E "^(qkv|o |down|gate_up)" >> $S
done
wait
SETTINGS="main: c2:PLUMB_CUDA_TMA_CLUSTER_PREFILL=1 nm:PLUMB_CUDA_ATT_NOMASK=1" PHASES="prefill" timeout 230 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
SETTINGS="main: acq:PLUMB_CUDA_FOLD=acq_rel" PHASES="tg" timeout 150 bash tools/device/ab-8b.sh $B $OUT/abt > $OUT/abt.log 2>&1
echo "abt rc=$?" >> $S
grep -E "^(##|pp|tg)" $OUT/abt/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz bits ab abt && rm -rf bits ab abt
