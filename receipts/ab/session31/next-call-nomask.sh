#!/usr/bin/env bash
# For the next device session: try/s31-nomask (the attention softmax without masks on whole tiles)
# against main's attention (the try/s31-c2 stage at its defaults runs main's attention kernels).
# Stage: git checkout try/s31-nomask && NVRTC_LIB_DIR=/tmp/nvrtc130/nvidia/cu13/lib TESTS=0 \
#   tools/device/stage.sh /tmp/stage-nm   (copy /tmp/stage-nm.tar.xz and stage-c2b.tar.xz to .gpu/)
# Bits (row_invariance's attention tests, conformance), then tg64 / depth 512, pp2048 and 64
# requests both ways, two rounds alternating; the attention event-timed.
set -u
source tools/device/settings.sh; gpu_env
B=/tmp/nm
mkdir -p $B /tmp/c2b && tar -xJf .gpu/stage-nm.tar.xz -C $B && tar -xJf .gpu/stage-c2b.tar.xz -C /tmp/c2b
S=$OUT/summary.txt
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv > $S 2>&1
bash tools/device/seed-kernels.sh $B /tmp/c2b > /dev/null 2>&1
([ -e /tmp/l8b/config.json ] || $B/plumb synth --arch llama-3.1-8b -t 14 /tmp/l8b > $OUT/synth.log 2>&1) &
# The bit tests, as ab-8b.sh's tests phase runs them (its ab.txt gives each one's result line).
SETTINGS="bits:" PHASES="tests" TESTS="row_invariance conformance graphs" timeout 300 bash tools/device/ab-8b.sh $B $OUT/bits > $OUT/bits.log 2>&1
echo "bits rc=$?" >> $S
cat $OUT/bits/ab.txt >> $S
wait
SETTINGS="nm: main:BIN=/tmp/c2b" PHASES="tg prefill" timeout 330 bash tools/device/ab-8b.sh $B $OUT/ab > $OUT/ab.log 2>&1
echo "ab rc=$?" >> $S
grep -E "^(##|pp|tg)" $OUT/ab/ab.txt >> $S
SETTINGS="nm: main:BIN=/tmp/c2b" PHASES="profile" ROUNDS=1 KERNELS="attention" timeout 130 bash tools/device/ab-8b.sh $B $OUT/abp > $OUT/abp.log 2>&1
grep -vE "^\(" $OUT/abp/ab.txt >> $S
cd $OUT && tar -cJf rest.tar.xz bits ab abp && rm -rf bits ab abp
