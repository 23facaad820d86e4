#!/usr/bin/env bash
# Session 29 call 1: try/s28 (/tmp/c) bit tests of the interleaved GLU and pipelined attention, then pp2048 A/B against main (/tmp/m).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/c
mkdir -p $B /tmp/m && tar -xJf .gpu/stage-s29.tar.xz -C $B && tar -xJf .gpu/stage-m.tar.xz -C /tmp/m
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B /tmp/m >> $S 2>&1
ls $PLUMB_HOME/kernels | wc -l >> $S
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
SECONDS=0
timeout 120 $B/fused tensor_core_swiglu --test-threads 1 > $OUT/fused.log 2>&1
echo "fused (GLU) rc=$? ${SECONDS}s $(grep 'test result' $OUT/fused.log | tail -1)" >> $S
grep -E "panicked|GLU|left|right" $OUT/fused.log | head -8 >> $S
SECONDS=0
timeout 120 $B/row_invariance attention_of_prefill_chunks --test-threads 1 > $OUT/row_invariance.log 2>&1
echo "row_invariance prefill chunks rc=$? ${SECONDS}s $(grep 'test result' $OUT/row_invariance.log | tail -1)" >> $S
grep -E "panicked|left|right" $OUT/row_invariance.log | head -8 >> $S
wait
SETTINGS="new: nogli:PLUMB_CUDA_TMA_GLI=0 main:BIN=/tmp/m" PHASES="prefill" timeout 300 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp|prefill)" $OUT/ab/ab.txt >> $S
SETTINGS="new: main:BIN=/tmp/m" PHASES="profile" ROUNDS=1 KERNELS="attention|linear_tma|silu|norm|rope|fold" timeout 200 bash tools/device/ab-8b.sh $B $OUT/abp > $OUT/abp.log 2>&1
echo "abp rc=$?" >> $S
cat $OUT/abp/ab.txt >> $S
