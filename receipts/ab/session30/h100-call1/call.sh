#!/usr/bin/env bash
# Session 30 call 1: the interleaved GLU staged by one rank-4 box a stage (try/s29 at 9e67f44): its bit test, then one prefill event-timed with and without it.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/c4
mkdir -p $B && tar -xJf .gpu/stage-s29c.tar.xz -C $B
S=$OUT/summary.txt
bash tools/device/seed-kernels.sh $B > /dev/null 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
timeout 60 $B/fused tensor_core_swiglu --test-threads 1 --nocapture > $OUT/fused.log 2>&1
echo "fused (GLU) rc=$? $(grep -E 'GLU launches|test result' $OUT/fused.log | tr '\n' ' ')" >> $S
wait
for s in gli nogli; do
  e=1; [ $s = nogli ] && e=0
  PLUMB_CUDA_TMA_GLI=$e PLUMB_CUDA_PROFILE=1 timeout 60 $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b \
    --prompt-len 2048 --gen-len 2 --depth 0 --repetitions 1 > $OUT/profile-$s.txt 2>&1
  echo "## [$s] rc=$?" >> $S
  grep -E "linear_tma_bf16_n1[29]|silu|^pp" $OUT/profile-$s.txt >> $S
done
