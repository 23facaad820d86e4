#!/usr/bin/env bash
# Session 30 call 4: try/s30-attfill (main's kernels, 692651b/19f7e0e + PLUMB_CUDA_ATT_FILL_WARPS). On an H200 first the
# 8B figures (plumb bench pp2048/tg64/depth 512 and --concurrency 1,8,32,64, f16 KV); then an A/B at 64 requests of
# decode rows splitting their contexts (fill 8) against walking them (fill 3, the default), two rounds alternating.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/a
mkdir -p $B && tar -xJf .gpu/stage-s30af.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B >> $S 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
for t in fused row_invariance conformance graphs; do
  SECONDS=0
  timeout 100 $B/$t --test-threads 1 > $OUT/test-$t.log 2>&1
  echo "$t rc=$? ${SECONDS}s $(grep 'test result' $OUT/test-$t.log | tail -1)" >> $S
done
PLUMB_CUDA_ATT_FILL_WARPS=8 timeout 100 $B/row_invariance --test-threads 1 > $OUT/test-row_invariance-fill8.log 2>&1
echo "row_invariance (fill 8) rc=$? $(grep 'test result' $OUT/test-row_invariance-fill8.log | tail -1)" >> $S
wait
if grep -q H200 $S; then
  mkdir -p $OUT/h200
  timeout 120 $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 --gen-len 64 --depth 512 --repetitions 2 --receipt $OUT/h200/bench-8b-f16.json > $OUT/h200/bench.log 2>&1
  echo "bench rc=$?" >> $S; tail -7 $OUT/h200/bench.log >> $S
  timeout 200 $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --concurrency 1,8,32,64 --prompt-len 512 --gen-len 256 --receipt $OUT/h200/conc-8b-f16.json --plot $OUT/h200/concurrency-cuda-8b-f16.svg > $OUT/h200/conc.log 2>&1
  echo "conc rc=$?" >> $S; tail -10 $OUT/h200/conc.log >> $S
fi
SETTINGS="fill3: fill8:PLUMB_CUDA_ATT_FILL_WARPS=8" PHASES="conc" LEVELS=64 timeout 240 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
cat $OUT/ab/ab.txt >> $S
cd $OUT && tar -cf ab.tar ab && rm -rf ab
