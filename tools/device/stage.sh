#!/usr/bin/env bash
# stage.sh — builds what tools/device/gpu-run.sh runs and copies it into one folder:
# the release `plumb` binary, the CUDA backend's test binaries (compile, conformance,
# row_invariance, graphs, pick), the engine's GPU tests (lanes_parity_cuda, picks_cuda,
# drafts_cuda) and the server's tests built to serve on the GPU (feature `cuda-tests`: errors,
# load, model_defaults, fuzz_json), plus gpu-run.sh itself.
#
#   tools/device/stage.sh DEST_DIR
#
# Builds with the caller's CARGO_TARGET_DIR (default: target). The binaries need no Rust
# toolchain where they run; CUDA's driver and NVRTC are loaded at run time.
set -euo pipefail
DEST=${1:?usage: stage.sh DEST_DIR}
mkdir -p "$DEST"
cargo build --release -p plumb-cli
target=${CARGO_TARGET_DIR:-target}
cp "$target/release/plumb" "$DEST/plumb"
cargo test --release -p plumb-backend-cuda -p plumb-engine -p plumb-server --features plumb-server/cuda-tests \
    --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, shutil, sys
dest = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    name = m.get("target", {}).get("name")
    pkg = m.get("package_id", "")
    wanted = {
        "plumb-backend-cuda": ("compile", "conformance", "row_invariance", "graphs", "pick", "memory"),
        "plumb-engine": ("lanes_parity_cuda", "picks_cuda", "drafts_cuda"),
        "plumb-server": ("errors", "load", "model_defaults", "fuzz_json"),
    }
    crate = next((c for c in wanted if f"/{c.removeprefix('plumb-')}#" in pkg or f"{c}@" in pkg or f"{c} " in pkg), None)
    if exe and m.get("target", {}).get("kind") == ["test"] and crate and name in wanted[crate]:
        out = name if crate != "plumb-server" else f"server_{name}"
        shutil.copy(exe, f"{dest}/{out}")
        print(f"staged {out}")
' "$DEST"
cp "$(dirname "$0")/gpu-run.sh" "$DEST/gpu-run.sh"
ls -la "$DEST"
