#!/usr/bin/env bash
# seed-kernels.sh — puts the CUBIN tools/device/stage.sh precompiled (DIR/kernels, when it ran with
# NVRTC_LIB_DIR) into plumb's kernel cache, so a fresh GPU machine skips the minute or more NVRTC
# takes there (in every process, until one finishes and writes the cache). The cache is where
# plumb looks (crates/backend-cuda/src/compile.rs, `cache_dir`): $PLUMB_HOME/kernels, else
# $XDG_CACHE_HOME/plumb/kernels, else $HOME/.cache/plumb/kernels. The file's name is its cache key
# (the kernel sources, the compile options and NVRTC's major.minor): a CUBIN made for other
# sources or another NVRTC is never read, and plumb compiles as it would have. Prints where it
# seeded, or why not.
#
#   tools/device/seed-kernels.sh DIR [DIR ...]
#
# Session 28 lost its last device call to an earlier version that did nothing without PLUMB_HOME
# (which settings.sh's gpu_env sets, and a call script seeding first did not): every test and
# bench compiled the kernels itself and ran into its timeout.
set -u
if [ -n "${PLUMB_HOME:-}" ]; then
    cache=$PLUMB_HOME/kernels
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
    cache=$XDG_CACHE_HOME/plumb/kernels
elif [ -n "${HOME:-}" ]; then
    cache=$HOME/.cache/plumb/kernels
else
    echo "seed-kernels: no PLUMB_HOME, XDG_CACHE_HOME or HOME: nothing seeded" >&2
    exit 0
fi
for d in "$@"; do
    if ! ls "$d"/kernels/*.cubin >/dev/null 2>&1; then
        echo "seed-kernels: no precompiled kernels in $d (stage.sh without NVRTC_LIB_DIR?)" >&2
        continue
    fi
    mkdir -p "$cache" && cp -n "$d"/kernels/*.cubin "$cache/" && echo "seed-kernels: $d/kernels -> $cache"
done
exit 0
