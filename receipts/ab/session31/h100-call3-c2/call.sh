#!/usr/bin/env bash
# Session 31 call 3: try/s31-c2 (prefill TMA products in clusters of two sharing x,
# PLUMB_CUDA_TMA_CLUSTER_PREFILL=1): the backend's bit tests (row_invariance and fused run the
# clustered launches against the unclustered ones), gemm_8b at M = 2,048 both ways, then pp2048
# both ways, two rounds alternating.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/c2
mkdir -p $B && tar -xJf .gpu/stage-c2.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B > /dev/null 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
for t in fused row_invariance conformance graphs; do
  SECONDS=0
  timeout 200 $B/$t --test-threads 1 > $OUT/test-$t.log 2>&1
  echo "$t rc=$? ${SECONDS}s $(grep 'test result' $OUT/test-$t.log | tail -1)" >> $S
  grep -E "panicked|GLU launches|clusters" $OUT/test-$t.log | head -8 >> $S
done
for c in 0 1; do
  echo "## gemm_8b M=2048, PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c" >> $S
  PLUMB_CUDA_TMA_CLUSTER_PREFILL=$c GEMM_MS=2048 timeout 100 $B/gemm_8b $OUT/gemm-c$c.json 2>&1 | grep -E "^(qkv|o |down|gate_up|head)" >> $S
done
wait
SETTINGS="main: c2:PLUMB_CUDA_TMA_CLUSTER_PREFILL=1" PHASES="prefill" timeout 200 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp)" $OUT/ab/ab.txt >> $S
SETTINGS="main: c2:PLUMB_CUDA_TMA_CLUSTER_PREFILL=1" PHASES="profile" ROUNDS=1 KERNELS="linear_tma_bf16_n1|attention_wgmma|add_rms" timeout 120 bash tools/device/ab-8b.sh $B $OUT/abp > $OUT/abp.log 2>&1
echo "abp rc=$?" >> $S
grep -vE "_n8|_n16" $OUT/abp/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz ab abp test-*.log && rm -rf ab abp test-*.log
