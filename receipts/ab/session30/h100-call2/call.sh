#!/usr/bin/env bash
# Session 30 call 2: main + the one-box interleaved GLU (try/s30-gli; nof32: try/s30-nof32, the same with its f32 output unwritten, measurement only): the backend's bit tests, then pp2048 with it and without (PLUMB_CUDA_TMA_GLI=0 = main's products + silu_mul), two rounds alternating.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/g
mkdir -p $B /tmp/n && tar -xJf .gpu/stage-s30gli.tar.xz -C $B && tar -xJf .gpu/stage-s30nof32.tar.xz -C /tmp/n
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B /tmp/n >> $S 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
for t in fused row_invariance conformance graphs; do
  SECONDS=0
  timeout 200 $B/$t --test-threads 1 > $OUT/test-$t.log 2>&1
  echo "$t rc=$? ${SECONDS}s $(grep 'test result' $OUT/test-$t.log | tail -1)" >> $S
  grep -E "panicked|GLU launches" $OUT/test-$t.log | head -8 >> $S
done
wait
ST="gli: nogli:PLUMB_CUDA_TMA_GLI=0 nof32:BIN=/tmp/n,PLUMB_CUDA_GLI_DROP_F32=1"
SETTINGS="$ST" PHASES="prefill" timeout 250 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
SETTINGS="$ST" PHASES="profile" ROUNDS=1 KERNELS="linear_tma_bf16_n1|silu|attention_wgmma|add_rms" timeout 170 bash tools/device/ab-8b.sh $B $OUT/abp > $OUT/abp.log 2>&1
echo "abp rc=$?" >> $S
grep -vE "_n8|_n16" $OUT/abp/ab.txt >> $S
