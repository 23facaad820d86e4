#!/usr/bin/env bash
# stage.sh — builds what tools/device/gpu-run.sh and bench-8b.sh run and packs it into one archive
# small enough to travel to a GPU machine: the `plumb` binary, the CUDA backend's test binaries
# (compile, conformance, clusters, row_invariance, fused, graphs, pick, memory, mma_probe, timeline) and its gemm_8b, wide_head and
# stage_boundary examples,
# the engine's GPU tests (lanes_parity_cuda, picks_cuda, drafts_cuda) and the server's tests built
# to serve on the GPU (feature `cuda-tests`: errors, load, model_defaults, fuzz_json), plus the
# scripts, all stripped, in DEST_DIR and in DEST_DIR.tar.xz.
#
#   tools/device/stage.sh DEST_DIR
#
# Builds with the `gpu` profile (release code, no LTO, no debug info: see Cargo.toml) into the
# caller's CARGO_TARGET_DIR (default: target); PROFILE=release builds the release profile instead.
# TESTS=0 stages only `plumb`, gemm_8b and the backend's tests (no engine or server test binaries).
# NVRTC_LIB_DIR=DIR also compiles the kernels for sm_90a with the NVRTC in DIR into DEST/kernels
# (seed-kernels.sh): a fresh GPU machine then loads them instead of compiling for a minute.
# The binaries need no Rust toolchain where they run; CUDA's driver and NVRTC load at run time.
# Unpack there with `tar -xJf DEST_DIR.tar.xz -C DIR`.
set -euo pipefail
DEST=${1:?usage: stage.sh DEST_DIR}
PROFILE=${PROFILE:-gpu}
rm -rf "$DEST"
mkdir -p "$DEST"
target=${CARGO_TARGET_DIR:-target}
cargo build --profile "$PROFILE" -p plumb-cli
cargo build --profile "$PROFILE" -p plumb-backend-cuda --example gemm_8b --example wide_head --example stage_boundary
cp "$target/$PROFILE/plumb" "$DEST/plumb"
cp "$target/$PROFILE/examples/gemm_8b" "$DEST/gemm_8b"
cp "$target/$PROFILE/examples/wide_head" "$DEST/wide_head"
cp "$target/$PROFILE/examples/stage_boundary" "$DEST/stage_boundary"
packages=(-p plumb-backend-cuda)
if [ "${TESTS:-1}" != 0 ]; then
    packages+=(-p plumb-engine -p plumb-server --features plumb-server/cuda-tests)
fi
cargo test --profile "$PROFILE" "${packages[@]}" --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, shutil, sys
dest = sys.argv[1]
wanted = {
    "plumb-backend-cuda": ("compile", "conformance", "clusters", "row_invariance", "fused", "graphs", "pick", "memory", "mma_probe", "timeline"),
    "plumb-engine": ("lanes_parity_cuda", "picks_cuda", "drafts_cuda"),
    "plumb-server": ("errors", "load", "model_defaults", "fuzz_json"),
}
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    name = m.get("target", {}).get("name")
    pkg = m.get("package_id", "")
    # package ids look like "path+file:///…/crates/backend-cuda#plumb-backend-cuda@0.1.0".
    crate = next((c for c in wanted if f"#{c}@" in pkg or f"{c}@" in pkg or f"{c} " in pkg), None)
    if exe and m.get("target", {}).get("kind") == ["test"] and crate and name in wanted[crate]:
        out = name if crate != "plumb-server" else f"server_{name}"
        shutil.copy(exe, f"{dest}/{out}")
        print(f"staged {out}")
' "$DEST"
strip "$DEST"/*
cp "$(dirname "$0")"/gpu-run.sh "$(dirname "$0")"/bench-8b.sh "$(dirname "$0")"/ncu-8b.sh \
    "$(dirname "$0")"/seed-kernels.sh "$DEST/"
# With NVRTC_LIB_DIR (the lib folder of the PyPI wheel nvidia-cuda-nvrtc at the GPU machine's
# version), the kernels are compiled here into DEST/kernels, which seed-kernels.sh puts into the
# GPU machine's kernel cache; with TIMELINE=1 also the time-stamped build `PLUMB_CUDA_TIMELINE`
# compiles (its own cache key), which the `timeline` test and timeline runs load; VARIANTS adds
# kernel builds of compile-time switches (e.g. VARIANTS=PLUMB_CUDA_NORM_RELEASE=late).
if [ -n "${NVRTC_LIB_DIR:-}" ]; then
    cargo build --profile "$PROFILE" -p plumb-backend-cuda --example precompile
    # One kernel build a call, under the given VAR=VALUE assignments (its own cache key).
    precompile() { env "$@" LD_LIBRARY_PATH="$NVRTC_LIB_DIR" PLUMB_HOME="$DEST" "$target/$PROFILE/examples/precompile" sm_90a; }
    # The default build and VARIANTS="VAR=VALUE[,VAR=VALUE] ...", kernel builds of compile-time
    # switches; each also time-stamped under TIMELINE=1.
    for v in "" ${VARIANTS:-}; do
        read -r -a assign <<<"${v//,/ }"
        precompile "${assign[@]}"
        if [ "${TIMELINE:-0}" = 1 ]; then
            precompile "${assign[@]}" PLUMB_CUDA_TIMELINE=1
        fi
    done
fi
tar -C "$DEST" -cf - . | xz -T2 -3 >"$DEST.tar.xz"
ls -la "$DEST" "$DEST.tar.xz"
