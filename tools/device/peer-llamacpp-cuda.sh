#!/usr/bin/env bash
# Same-run CUDA comparison of plumb and llama.cpp on the default model, on the GPU machine.
# llama.cpp (commit 0c1e570, as vendored in the PyPI sdist llama-cpp-python==0.3.36) is the peer;
# none of it is committed. Run from the repository root there, in two calls of the device tool
# while the machine stays warm (the carry limit is 64 MiB a call, the model alone is 98 MB):
#
#   here:   python3 -m pip download --no-deps --no-binary llama-cpp-python llama-cpp-python==0.3.36
#           (unpack; drop vendor/llama.cpp/{models,docs,media,benches,tools/ui} and the ggml backends
#           other than cpu and cuda; tar -cJf .gpu/llama-src.tar.xz llama.cpp)
#           strip and xz a release `plumb` to .gpu/plumb.xz; split -b 49181216 -d MODEL .gpu/m
#   call 1: PHASE=build bash tools/device/peer-llamacpp-cuda.sh   (carry .gpu/plumb.xz,
#           .gpu/llama-src.tar.xz, .gpu/m00; builds llama-bench for sm_90 in $WORK, outside the
#           tree: a later call's carry replaces .gpu there)
#   call 2: PHASE=bench bash tools/device/peer-llamacpp-cuda.sh   (carry .gpu/m01; writes
#           $OUT/bench-cuda-smollm2.json and $OUT/peer-llamacpp-cuda.json, measured back to back)
set -euo pipefail
work=${WORK:-/tmp/plumb-peer-cuda}
src=$work/llama.cpp
case "${PHASE:?PHASE=build or PHASE=bench}" in
build)
    mkdir -p "$work"
    xz -dc .gpu/plumb.xz >"$work/plumb" && chmod +x "$work/plumb"
    tar -xJf .gpu/llama-src.tar.xz -C "$work"
    cp .gpu/m00 "$work/model.part0"
    cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF >/dev/null
    timeout "${BUILD_SECS:-540}" cmake --build "$src/build" -j"$(nproc)" --target llama-bench 2>&1 | tail -3
    ;;
bench)
    # MODEL: the default model already on the machine (else rebuilt from the two parts);
    # PLUMB: the plumb binary to run (else the one call 1 unpacked).
    model=${MODEL:-$work/smollm2.gguf}
    [ -n "${MODEL:-}" ] || cat "$work/model.part0" .gpu/m01 >"$model"
    plumb=${PLUMB:-$work/plumb}
    # A build that ran out of time in call 1 finishes here.
    cmake --build "$src/build" -j"$(nproc)" --target llama-bench 2>&1 | tail -1
    reps=${REPS:-5}
    "$plumb" bench --model "$model" --device cuda --repetitions "$reps" \
        --receipt "$OUT/bench-cuda-smollm2.json"
    "$src/build/bin/llama-bench" -m "$model" -ngl 99 -r "$reps" -p 512 -n 128 -d 0,512 -o json \
        >"$OUT/llama-bench.json" 2>"$OUT/llama-bench.log"
    python3 - "$OUT/llama-bench.json" "$model" "$OUT/peer-llamacpp-cuda.json" <<'PY'
import hashlib, json, subprocess, sys, time
runs = json.load(open(sys.argv[1]))
model, out = sys.argv[2], sys.argv[3]
figures = {"build_commit": runs[0].get("build_commit"), "gpu": runs[0].get("gpu_info"), "tests": []}
for r in runs:
    name = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + (f"_at_depth{r['n_depth']}" if r.get("n_depth") else "")
    figures["tests"].append({"test": name, "avg_tokens_per_s": r["avg_ts"], "stddev_tokens_per_s": r["stddev_ts"], "samples_ts": r.get("samples_ts")})
    figures[f"{name}_tokens_per_s"] = r["avg_ts"]
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
receipt = {
    "kind": "peer-bench",
    "peer": "llama.cpp llama-bench (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_CUDA, sm_90), -ngl 99",
    "command": "PHASE=bench bash tools/device/peer-llamacpp-cuda.sh",
    "machine": {"gpu": gpu},
    "model": {"path": model, "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest()},
    "unix_time": int(time.time()),
    "evidence_origin": "current_invocation",
    "figures": figures,
}
open(out, "w").write(json.dumps(receipt, indent=2) + "\n")
p = json.load(open(out.replace("peer-llamacpp-cuda", "bench-cuda-smollm2")))["figures"]
for name in ("pp512", "tg128", "tg128_at_depth512"):
    a, b = p.get(f"{name}_tokens_per_s"), figures.get(f"{name}_tokens_per_s")
    print(f"{name:<20} plumb {a:9.1f}  llama.cpp {b:9.1f}  ratio {a / b:.2f}")
PY
    ;;
esac
