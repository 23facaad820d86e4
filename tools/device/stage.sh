#!/usr/bin/env bash
# stage.sh — builds what tools/device/gpu-run.sh runs and copies it into one folder:
# the release `plumb` binary and the CUDA backend's test binaries (compile, conformance,
# row_invariance, graphs), plus gpu-run.sh itself.
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
cargo test --release -p plumb-backend-cuda --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, shutil, sys
dest = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    exe = m.get("executable")
    name = m.get("target", {}).get("name")
    if exe and m.get("target", {}).get("kind") == ["test"] and name in ("compile", "conformance", "row_invariance", "graphs"):
        shutil.copy(exe, f"{dest}/{name}")
        print(f"staged {name}")
' "$DEST"
cp "$(dirname "$0")/gpu-run.sh" "$DEST/gpu-run.sh"
ls -la "$DEST"
