#!/usr/bin/env bash
# seed-kernels.sh — puts the CUBIN tools/device/stage.sh precompiled (DIR/kernels, when it ran with
# NVRTC_LIB_DIR) into plumb's kernel cache, $PLUMB_HOME/kernels, so a fresh GPU machine skips the
# minute NVRTC takes there. The file's name is its cache key (the kernel sources, the compile
# options and NVRTC's major.minor): a CUBIN made for other sources or another NVRTC is never read,
# and plumb compiles as it would have. Does nothing without PLUMB_HOME or without DIR/kernels.
#
#   tools/device/seed-kernels.sh DIR [DIR ...]
set -u
[ -n "${PLUMB_HOME:-}" ] || exit 0
for d in "$@"; do
    [ -d "$d/kernels" ] || continue
    mkdir -p "$PLUMB_HOME/kernels" && cp -n "$d"/kernels/*.cubin "$PLUMB_HOME/kernels/" 2>/dev/null
done
exit 0
