#!/usr/bin/env bash
# Session 34, call F (stage: TESTS=0 tools/device/stage.sh, carry .gpu): the K split over a
# cluster's CTAs at decode rows (`PLUMB_CUDA_TMA_KSPLIT=2|4`, the `_s2` / `_s4` instances: rank 0
# folds the other ranks' chunk sums, handed over by st.async, where main writes every chunk's
# partials to global memory and folds them in the last block or, past 4 rows, a fold launch).
# The bit tests first (the clusters test compares the K splits with main's global fold; the row
# test under the split in four, the fused test under the split in two), then gemm_8b at M = 1, 8, 64 under main / s2 / s4,
# then 8 and 64 concurrent requests and one request's tg64 / depth 512 (one round: main s2 s4),
# then main's pp2048 and stage_boundary.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s34
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s34.tar.xz -C $B; }
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
mkdir -p $OUT/bits
timeout 90 $B/clusters --test-threads 1 > $OUT/bits/clusters.log 2>&1
ok=$?
echo "[main] clusters rc=$ok $(grep 'test result' $OUT/bits/clusters.log | tail -1)" >> $S
for t in graphs conformance; do
  timeout 90 $B/$t --test-threads 1 > $OUT/bits/$t.log 2>&1
  echo "[main] $t rc=$? $(grep 'test result' $OUT/bits/$t.log | tail -1)" >> $S
done
# A K split that failed its bits (or hung) is not timed: main alone.
KSV="0 2 4" SETS="main: s2:PLUMB_CUDA_TMA_KSPLIT=2 s4:PLUMB_CUDA_TMA_KSPLIT=4"
[ $ok = 0 ] || { KSV=0 SETS="main:"; echo "clusters failed: the K splits are not timed" >> $S; }
[ $ok = 0 ] && for kt in 4:row_invariance 2:fused; do
  ks=${kt%%:*} t=${kt#*:}
  PLUMB_CUDA_TMA_KSPLIT=$ks timeout 90 $B/$t --test-threads 1 > $OUT/bits/$t-s$ks.log 2>&1
  echo "[s$ks] $t rc=$? $(grep 'test result' $OUT/bits/$t-s$ks.log | tail -1)" >> $S
done
wait
for v in $KSV; do
  echo "## gemm_8b M = 1, 8, 64, PLUMB_CUDA_TMA_KSPLIT=$v" >> $S
  PLUMB_CUDA_TMA_KSPLIT=$v GEMM_MS=1,8,64 GEMM_SHAPES=qkv,o,down,gate_up timeout 60 $B/gemm_8b $OUT/gemm-s$v.json 2>&1 \
    | grep -E "^(qkv|o |down|gate_up)" >> $S
done
SETTINGS="$SETS" PHASES="conc tg" LEVELS=8,64 ROUNDS=1 \
  timeout 290 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -vE "^\(" $OUT/ab/ab.txt >> $S
echo "## main pp2048" >> $S
timeout 40 $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 --gen-len 1 --repetitions 3 \
  --receipt $OUT/pp2048.json 2>&1 | grep -E "^(pp|roofline)" >> $S
echo "## stage_boundary" >> $S
timeout 40 $B/stage_boundary 2000 >> $S 2>&1
echo "stage_boundary rc=$?" >> $S
cd $OUT && tar -cJf rest.tar.xz bits ab && rm -rf bits ab
