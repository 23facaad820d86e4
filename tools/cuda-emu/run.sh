#!/usr/bin/env bash
# Runs a command with the CPU emulator standing in for the CUDA driver and NVRTC, e.g.
#   bash tools/cuda-emu/run.sh cargo test -p plumb-backend-cuda --test fused
# Builds the emulator's library (once per change of driver.cpp) under target/cuda-emu, puts it on
# LD_LIBRARY_PATH as libcuda.so and libnvrtc.so, and keeps the emulated kernels' cache in a
# PLUMB_HOME of their own (target/cuda-emu/home) unless PLUMB_HOME is set. Settings:
#   PLUMB_CUDA_EMU_ORDER=blocks-reversed,threads-reversed   run blocks / a block's threads last first
#   PLUMB_CUDA_EMU_CC_MAJOR / _MINOR (9 / 0), PLUMB_CUDA_EMU_SMS (132), PLUMB_CUDA_EMU_MEM_GB (8)
#   PLUMB_CUDA_EMU_OPT (-O2): g++'s optimization of the kernels
# What passes here passed on the CPU: indices, barriers and the data threads exchange are
# checked; the GPU's bits, its tensor-core kernels and its speed are not (see prelude.h).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
lib="$root/target/cuda-emu/lib"
mkdir -p "$lib"
if [[ ! -f "$lib/libcuda-emu.so" || "$here/driver.cpp" -nt "$lib/libcuda-emu.so" ]]; then
    g++ -std=c++17 -O1 -fPIC -shared -Wall -Wno-unused-parameter -o "$lib/libcuda-emu.so" "$here/driver.cpp" -ldl
fi
for name in libcuda.so libcuda.so.1 libnvrtc.so; do
    ln -sf libcuda-emu.so "$lib/$name"
done
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PLUMB_CUDA_EMU_DIR="$here"
# The kernel cache's key is the kernel source, not the emulator's: a home per emulator version.
version="$(cat "$here/prelude.h" "$here/runtime.h" "$here/tensor_map.h" "$here/translate.py" | sha256sum | cut -c1-12)"
export PLUMB_HOME="${PLUMB_HOME:-$root/target/cuda-emu/home-$version}"
exec "$@"
