#!/usr/bin/env bash
# Session 28 (last, lean): try/s28 (/tmp/c: pipelined wgmma attention + interleaved GLU for prefill): its bit tests, then pp2048 against main (/tmp/m), one run each.
set -u
B=/tmp/c
mkdir -p $B /tmp/m && tar -xJf .gpu/stage-c.tar.xz -C $B && tar -xJf .gpu/stage-m.tar.xz -C /tmp/m
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B /tmp/m > $OUT/seed.log 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
SECONDS=0
timeout 60 $B/fused tensor_core_swiglu --test-threads 1 > $OUT/fused.log 2>&1
echo "fused (GLU) rc=$? ${SECONDS}s $(grep 'test result' $OUT/fused.log | tail -1)" >> $S
grep -E "panicked|GLU launches" $OUT/fused.log | head -4 >> $S
SECONDS=0
timeout 60 $B/row_invariance attention_of_prefill_chunks --test-threads 1 > $OUT/row_invariance.log 2>&1
echo "row_invariance prefill chunks rc=$? ${SECONDS}s $(grep 'test result' $OUT/row_invariance.log | tail -1)" >> $S
grep -E "panicked" $OUT/row_invariance.log | head -4 >> $S
wait
for s in new main new main; do
  d=$B; [ $s = main ] && d=/tmp/m
  SECONDS=0
  timeout 40 $d/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 --gen-len 2 --depth 0 \
    --repetitions 3 2>&1 | grep -E "^(pp|roofline|prefill)" | sed "s/^/[$s] /" >> $S
  echo "[$s] ${SECONDS}s" >> $S
done
