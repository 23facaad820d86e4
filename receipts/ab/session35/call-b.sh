#!/usr/bin/env bash
# Session 35's call B, on the machine call A left warm (its /tmp/s35 and /tmp/l8b): the
# concurrent decode under each K split, two rounds alternating (ab-8b.sh), at 8, 32 and 64
# requests: none (main's), `auto` (session 34's pick, 128-feature tasks at 5-32 rows) and on
# 64-feature tasks at 17-64 rows in clusters of 2 and 4 (session 35). Flip a default only where
# it wins at every level it touches. No carry needed beyond the tree.
set -u
source tools/device/settings.sh; gpu_env
SETTINGS="off:PLUMB_CUDA_TMA_KSPLIT=0 auto:PLUMB_CUDA_TMA_KSPLIT=auto n2:PLUMB_CUDA_TMA_KSPLIT_NARROW=2 n4:PLUMB_CUDA_TMA_KSPLIT_NARROW=4" \
  PHASES="conc" LEVELS=8,32,64 ROUNDS=2 timeout 560 bash tools/device/ab-8b.sh /tmp/s35 $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?"
grep -vE "^\(" $OUT/ab/ab.txt
cd $OUT && tar -cJf ab.tar.xz ab && rm -rf ab
