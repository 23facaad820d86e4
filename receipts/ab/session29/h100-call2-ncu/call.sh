#!/usr/bin/env bash
# Session 29 call 2: Nsight Compute on one 2,048-token prefill: try/s28's interleaved GLU and pipelined attention against main's products and attention.
set -u
source tools/device/settings.sh; gpu_env
export PLUMB_CUDA_GRAPHS=0
B=/tmp/c
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s29.tar.xz -C $B; }
[ -x /tmp/m/plumb ] || { mkdir -p /tmp/m && tar -xJf .gpu/stage-m.tar.xz -C /tmp/m; }
bash tools/device/seed-kernels.sh $B /tmp/m > /dev/null 2>&1
[ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > /dev/null 2>&1
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
S=$OUT/summary.txt
for s in new main; do
  d=$B; [ $s = main ] && d=/tmp/m
  SECONDS=0
  timeout 200 "$NCU" --clock-control none -k "regex:linear_tma_bf16_n192|attention_wgmma|silu_mul" --launch-count 6 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    -f -o $OUT/ncu-$s $d/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 --gen-len 2 --depth 0 --repetitions 1 > $OUT/ncu-run-$s.log 2>&1
  echo "[$s] ncu rc=$? ${SECONDS}s" >> $S
  "$NCU" --import $OUT/ncu-$s.ncu-rep --page details > $OUT/ncu-$s.txt 2>&1
  grep -E "^  [a-z_0-9]+|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Local" $OUT/ncu-$s.txt | head -90 >> $S
done
rm -f $OUT/*.ncu-rep
