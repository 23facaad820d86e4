#!/usr/bin/env bash
# Session 35, call A (carry .gpu: stage-s34.tar.xz from TESTS=0 tools/device/stage.sh on main
# b45ba88's code, llama-src.tar.xz as tools/device/peer-llamacpp-cuda.sh says): llama.cpp's CUDA
# peer and plumb's figures on the 8B-shape checkpoint in one run (peer-llamacpp-8b.sh with
# PLUMB_FIGURES=1), with session 34's call H (the K split's `auto` pick against none, end to end)
# on the GPU while llama.cpp builds on 12 of the 16 cores. Outputs beyond the receipts are tarred
# (the tool returns at most 8 files).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s34
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s34.tar.xz -C $B; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
R=$OUT/run; mkdir -p $R
PLUMB=$B/plumb PLUMB_FIGURES=1 REPS=5 BUILD_JOBS=12 OUT=$R \
  WHILE_BUILDING="mkdir -p $R/h && OUT=$R/h bash receipts/ab/session34/call-h.sh" \
  bash tools/device/peer-llamacpp-8b.sh
echo "peer rc=$?"
echo "## call H"; cat $R/h/summary.txt 2>/dev/null
cd $R && mv peer-llamacpp-cuda-llama8b.json bench-cuda-llama8b-synth.json \
  bench-concurrency-cuda-llama8b-synth.json concurrency-cuda-llama8b-synth.svg $OUT/ 2>/dev/null
cd $OUT && tar -cJf rest.tar.xz run && rm -rf run
