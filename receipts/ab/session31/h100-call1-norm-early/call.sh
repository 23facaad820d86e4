#!/usr/bin/env bash
# Session 31 call 1: try/s30-norm-early (the norm inside the decode TMA products, early weight
# stages capped at 0 / 1) against main's launches and the uncapped norm inside: fused's bit tests
# under each, then pp512 / tg64 / depth 512, two rounds alternating. Then Nsight Compute on main's
# prefill attention (attention_wgmma_128_f16 in a 2,048-token prefill): its stall reasons.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/ne
mkdir -p $B && tar -xJf .gpu/stage-ne.tar.xz -C $B
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
SETTINGS="main: in:PLUMB_CUDA_TMA_NORM=1 in0:PLUMB_CUDA_TMA_NORM=1,PLUMB_CUDA_TMA_NORM_EARLY=0 in1:PLUMB_CUDA_TMA_NORM=1,PLUMB_CUDA_TMA_NORM_EARLY=1" \
  PHASES="tests tg" TESTS="fused" timeout 420 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
cat $OUT/ab/ab.txt >> $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
PLUMB_CUDA_GRAPHS=0 timeout 150 $NCU --clock-control none -k regex:attention_wgmma_128 --launch-skip 40 --launch-count 2 --set full -f -o $OUT/ncu/att \
  $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 --gen-len 2 --depth 0 --repetitions 2 > $OUT/ncu/run.log 2>&1
echo "ncu rc=$?" >> $S
$NCU --import $OUT/ncu/att.ncu-rep --page details > $OUT/ncu/details.txt 2>&1
$NCU --import $OUT/ncu/att.ncu-rep --page raw > $OUT/ncu/raw.txt 2>&1
grep -E "Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Executed Ipc|Issue Slots Busy|L2 Hit|Memory Throughput" $OUT/ncu/details.txt >> $S
grep -E "smsp__average_warp_latency_issue_stalled|smsp__pcsamp_warps_issue_stalled_[a-z_]+ " $OUT/ncu/raw.txt | grep -v "not_issued" | sort -k3 -g -r | head -60 >> $S
cd $OUT && tar -cf ab.tar ab ncu && rm -rf ab ncu
