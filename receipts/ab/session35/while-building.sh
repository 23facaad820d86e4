#!/usr/bin/env bash
# Run by call-a.sh while llama.cpp builds (B: the staged binaries; the checkpoint /tmp/l8b exists):
# the bit tests on this GPU (the K splits' among them), then gemm_8b at 1 to 64 rows with the LM
# head under each K split: none (main's), `auto` (PLUMB_CUDA_TMA_KSPLIT=auto: 128-feature tasks
# in clusters at 5-32 rows, session 34), and on 64-feature tasks at 17-64 rows in clusters of 2
# and 4 (PLUMB_CUDA_TMA_KSPLIT_NARROW=2|4, session 35). About 200 s.
set -u
source tools/device/settings.sh; gpu_env
S=$OUT/summary.txt
mkdir -p $OUT/bits
for t in clusters row_invariance fused conformance graphs; do
  SECONDS=0
  timeout 90 $B/$t --test-threads 1 > $OUT/bits/$t.log 2>&1
  echo "$t rc=$? ${SECONDS}s $(grep 'test result' $OUT/bits/$t.log | tail -1)" >> $S
done
for s in off:PLUMB_CUDA_TMA_KSPLIT=0 auto:PLUMB_CUDA_TMA_KSPLIT=auto n2:PLUMB_CUDA_TMA_KSPLIT_NARROW=2 \
         n4:PLUMB_CUDA_TMA_KSPLIT_NARROW=4; do
  echo "## gemm_8b [${s%%:*}] ${s#*:}" >> $S
  env ${s#*:} GEMM_MS=1,8,16,32,64 GEMM_SHAPES=qkv,o,down,gate_up,head timeout 60 $B/gemm_8b $OUT/gemm-${s%%:*}.json 2>&1 \
    | grep -E "^(qkv|o |down|gate_up|head)" >> $S
done
cd $OUT && tar -cJf bits.tar.xz bits && rm -rf bits
