#!/usr/bin/env bash
# Session 31 call 2: where main's prefill time goes, by Nsight Compute (main's kernels: the
# try/s30-norm-early stage runs them at its defaults). gemm_8b at M = 2,048 against cuBLASLt; the
# 192-row TMA product of gate|up alone under ncu (full set); every attention_wgmma_128 launch of a
# 2,048-token prefill run under ncu (warp states), their stall reasons.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/ne
mkdir -p $B && tar -xJf .gpu/stage-ne.tar.xz -C $B
bash tools/device/seed-kernels.sh $B > /dev/null 2>&1
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
($B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
GEMM_MS=2048 timeout 120 $B/gemm_8b $OUT/gemm.json >> $S 2>&1
echo "gemm rc=$?" >> $S
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
mkdir -p $OUT/ncu
for sh in gate_up qkv; do
GEMM_MS=2048 GEMM_SHAPES=$sh timeout 120 $NCU --clock-control none -k regex:linear_tma_bf16_n1 --launch-skip 2 --launch-count 1 --set full -f -o /tmp/gemm-$sh \
  $B/gemm_8b > $OUT/ncu/gemm-$sh-run.log 2>&1
echo "ncu gemm $sh rc=$?" >> $S
$NCU --import /tmp/gemm-$sh.ncu-rep --page details > $OUT/ncu/gemm-$sh-details.txt 2>&1
$NCU --import /tmp/gemm-$sh.ncu-rep --page raw > $OUT/ncu/gemm-$sh-raw.txt 2>&1
grep -E "^  [a-z_0-9]+|Duration|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Executed Ipc A|Issue Slots Busy|DRAM Throughput|L2 Hit|Compute \(SM\) Thr|Block Size|Grid Size|Shared Memory Config" $OUT/ncu/gemm-$sh-details.txt >> $S
grep -E "smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active.ratio|sm__pipe_tensor_op_hmma_cycles_active.avg.pct|sm__inst_executed_pipe_tensor" $OUT/ncu/gemm-$sh-raw.txt | awk '$NF+0 > 0.05' >> $S
done
wait
PLUMB_CUDA_GRAPHS=0 timeout 200 $NCU --clock-control none -k regex:attention_wgmma_128 --launch-skip 0 --launch-count 70 \
  --section SpeedOfLight --section LaunchStats --section WarpStateStats --section Occupancy --section SchedulerStats -f -o /tmp/att \
  $B/plumb bench --device cuda --kv-dtype f16 --model /tmp/l8b --prompt-len 2048 --gen-len 2 --depth 0 --repetitions 1 > $OUT/ncu/att-run.log 2>&1
echo "ncu att rc=$?" >> $S
$NCU --import /tmp/att.ncu-rep --page raw --csv > $OUT/ncu/att-raw.csv 2>&1
python3 - $OUT/ncu/att-raw.csv >> $S <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[0]; data = [r for r in rows[2:] if len(r) == len(hdr)]
col = {h: i for i, h in enumerate(hdr)}
dur = col.get("gpu__time_duration.sum")
print("attention launches:", len(data))
def f(r, k):
    try: return float(r[col[k]].replace(",", ""))
    except Exception: return 0.0
big = [r for r in data if f(r, "gpu__time_duration.sum") > 100000 or f(r, "gpu__time_duration.sum") > 100 and "usecond" in rows[1][dur]]
print("durations:", [r[dur] for r in data][:70], rows[1][dur])
pick = max(data, key=lambda r: f(r, "gpu__time_duration.sum"))
print("longest launch", pick[dur], "grid", pick[col.get("launch__grid_size", 0)], "regs", pick[col.get("launch__registers_per_thread", 0)])
st = [(h, f(pick, h)) for h in hdr if "issue_stalled" in h and h.endswith("per_issue_active.ratio")]
for h, v in sorted(st, key=lambda x: -x[1])[:16]: print(f"  {h} {v:.3f}")
for h in hdr:
    if any(k in h for k in ("warps_active.avg.pct_of_peak", "issue_active.avg.pct", "inst_executed.avg.per_cycle_active", "throughput.avg.pct_of_peak_sustained_elapsed")):
        print(" ", h, pick[col[h]])
PY
cd $OUT && tar -cJf ncu.tar.xz ncu && rm -rf ncu
