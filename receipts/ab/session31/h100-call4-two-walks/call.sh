#!/usr/bin/env bash
# Session 31 call 4: try/s31-att2 (the prefill attention's blocks take two walks side by side,
# sharing each staged K/V tile; PLUMB_CUDA_ATT_WGMMA_WALKS=1 the one-walk block): bit tests, then
# pp2048 both ways (two rounds alternating) and the attention event-timed. And why call 3's
# clustered prefill products ran at half speed: gemm_8b with and without clusters on a grid of a
# block per task (PLUMB_CUDA_TMA_PERSIST=0), where no block waits for a resident slot.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/at
mkdir -p $B /tmp/c2 && tar -xJf .gpu/stage-att.tar.xz -C $B && tar -xJf .gpu/stage-c2.tar.xz -C /tmp/c2
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B /tmp/c2 > /dev/null 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
for t in row_invariance conformance graphs fused; do
  SECONDS=0
  timeout 200 $B/$t --test-threads 1 > $OUT/test-$t.log 2>&1
  echo "$t rc=$? ${SECONDS}s $(grep 'test result' $OUT/test-$t.log | tail -1)" >> $S
  grep -E "panicked|walks" $OUT/test-$t.log | head -8 >> $S
done
for p in 1 0; do for c in 0 1; do
  echo "## gemm_8b M=2048, PLUMB_CUDA_TMA_PERSIST=$p PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c" >> $S
  PLUMB_CUDA_TMA_PERSIST=$p PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c GEMM_MS=2048 GEMM_SHAPES=qkv,down,gate_up timeout 60 /tmp/c2/gemm_8b $OUT/gemm-p$p-c$c.json 2>&1 | grep -E "^(qkv|o |down|gate_up|head)" >> $S
done; done
wait
SETTINGS="w2: w1:PLUMB_CUDA_ATT_WGMMA_WALKS=1" PHASES="prefill" timeout 200 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
SETTINGS="w2: w1:PLUMB_CUDA_ATT_WGMMA_WALKS=1" PHASES="profile" ROUNDS=1 KERNELS="attention_wgmma" timeout 130 bash tools/device/ab-8b.sh $B $OUT/abp > $OUT/abp.log 2>&1
echo "abp rc=$?" >> $S
cat $OUT/abp/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz ab abp test-*.log && rm -rf ab abp test-*.log
