#!/usr/bin/env bash
# Session 34, call H (stage: TESTS=0 tools/device/stage.sh, carry .gpu): the K split over a
# cluster where `tma::ks_auto` picks it (plain products at 5 to 32 rows whose split would fold in
# a launch: 4 CTAs at 8 rows, 2 at 16 and 32; PLUMB_CUDA_TMA_KSPLIT=auto) against none
# (PLUMB_CUDA_TMA_KSPLIT=0, main's), at 8 and 32 concurrent requests, two rounds alternating;
# the clusters test first under auto (call F ran row_invariance and fused under the forced splits),
# and gemm_8b at 8, 16 and 32 rows with the LM head under off and auto. Written in session 34, not
# run there (no device time left): restage main first, to /tmp/stage-s34 (carry .gpu).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s34
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s34.tar.xz -C $B; }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
mkdir -p $OUT/bits
for t in clusters; do
  PLUMB_CUDA_TMA_KSPLIT=auto timeout 60 $B/$t --test-threads 1 > $OUT/bits/$t.log 2>&1
  echo "[auto] $t rc=$? $(grep 'test result' $OUT/bits/$t.log | tail -1)" >> $S
done
wait
for v in 0 auto; do
  echo "## gemm_8b M = 8, 16, 32, PLUMB_CUDA_TMA_KSPLIT=$v" >> $S
  PLUMB_CUDA_TMA_KSPLIT=$v GEMM_MS=8,16,32 GEMM_SHAPES=qkv,o,down,gate_up,head timeout 60 $B/gemm_8b $OUT/gemm-$v.json 2>&1 \
    | grep -E "^(qkv|o |down|gate_up|head)" >> $S
done
SETTINGS="off:PLUMB_CUDA_TMA_KSPLIT=0 auto:PLUMB_CUDA_TMA_KSPLIT=auto" PHASES="conc" LEVELS=8,32 \
  timeout 170 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -vE "^\(" $OUT/ab/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz bits ab && rm -rf bits ab
