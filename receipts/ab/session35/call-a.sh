#!/usr/bin/env bash
# Session 35's call A, for the next session (no device machine was lent in session 35: the five
# starts tried were refused, then loans paused). Carry .gpu/stage-s35.tar.xz (TESTS=0
# tools/device/stage.sh on main 832036d or later: the K split over a cluster on 64-feature tasks,
# off by default) and .gpu/llama-src.tar.xz (as tools/device/peer-llamacpp-cuda.sh says).
# llama.cpp's CUDA peer and plumb's figures on the 8B-shape checkpoint in one run
# (peer-llamacpp-8b.sh with PLUMB_FIGURES=1); while llama.cpp builds on 12 of the 16 cores, the
# GPU runs while-building.sh (the bit tests and gemm_8b under each K split). Outputs beyond the
# receipts are tarred (the tool returns at most 8 files).
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/s35
[ -x $B/plumb ] || { mkdir -p $B && tar -xJf .gpu/stage-s35.tar.xz -C $B; }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
R=$OUT/run; mkdir -p $R
PLUMB=$B/plumb PLUMB_FIGURES=1 REPS=5 BUILD_JOBS=12 OUT=$R \
  WHILE_BUILDING="mkdir -p $R/w && OUT=$R/w B=$B bash receipts/ab/session35/while-building.sh" \
  bash tools/device/peer-llamacpp-8b.sh
echo "peer rc=$?"
echo "## while building"; cat $R/w/summary.txt 2>/dev/null
cd $R && mv peer-llamacpp-cuda-llama8b.json bench-cuda-llama8b-synth.json \
  bench-concurrency-cuda-llama8b-synth.json concurrency-cuda-llama8b-synth.svg $OUT/ 2>/dev/null
cd $OUT && tar -cJf rest.tar.xz run && rm -rf run
