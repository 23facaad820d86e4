#!/usr/bin/env bash
# For the next device session (not run in session 30: its device time was spent): try/s30-norm-early,
# the norm inside the decode TMA products (PLUMB_CUDA_TMA_NORM=1) with its early weight reads capped
# (PLUMB_CUDA_TMA_NORM_EARLY=n stages, a compile-time switch: each n its own kernel build, precompiled
# by stage.sh's VARIANTS). Session 26 measured the fused launches themselves break even or better
# while the product before each lost as much (their six early stages share its bandwidth); capped
# at 0-2 stages the norm's launch latency (~65 a token) may be kept without that.
# Stage: git checkout try/s30-norm-early && NVRTC_LIB_DIR=/tmp/nvrtc130/nvidia/cu13/lib TESTS=0 \
#   VARIANTS="PLUMB_CUDA_TMA_NORM_EARLY=0 PLUMB_CUDA_TMA_NORM_EARLY=1 PLUMB_CUDA_TMA_NORM_EARLY=2" \
#   tools/device/stage.sh /tmp/stage-ne   (then copy /tmp/stage-ne.tar.xz to .gpu/ and carry .gpu)
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/ne
mkdir -p $B && tar -xJf .gpu/stage-ne.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
SETTINGS="main: in:PLUMB_CUDA_TMA_NORM=1 in0:PLUMB_CUDA_TMA_NORM=1,PLUMB_CUDA_TMA_NORM_EARLY=0 in1:PLUMB_CUDA_TMA_NORM=1,PLUMB_CUDA_TMA_NORM_EARLY=1 in2:PLUMB_CUDA_TMA_NORM=1,PLUMB_CUDA_TMA_NORM_EARLY=2" \
  PHASES="tests tg" TESTS="fused" timeout 560 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
cat $OUT/ab/ab.txt >> $S
# The interleaved GLU at 512 rows (the 128-row `_gli` instance; session 30 measured 2,048 rows only):
SETTINGS="gli: nogli:PLUMB_CUDA_TMA_GLI=0" PHASES="prefill" PREFILL_LEN=512 timeout 200 bash tools/device/ab-8b.sh $B $OUT/ab512 > $OUT/ab512.log 2>&1
echo "ab512 rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab512/ab.txt >> $S
cd $OUT && tar -cf ab.tar ab ab512 && rm -rf ab ab512
