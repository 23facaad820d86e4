#!/usr/bin/env bash
# Same-run CPU comparison of plumb and llama.cpp on a Qwen3-MoE of 1.6 B parameters (0.59 B
# active; 64 experts, 8 active): `plumb synth --arch qwen3-moe-1.6b` (bf16), converted by
# llama.cpp's own convert_hf_to_gguf.py (the llama-cpp-python==0.3.36 sdist) to Q8_0, and to BF16
# then `llama-quantize` Q4_K_M. Both engines read the same two GGUF files, 2 threads, one after
# the other in this one invocation. Nothing but the receipts is kept in the repository: the
# checkpoints live in $WORK (default /tmp/plumb-moe-bench, ~6 GB) and `CLEAN=1` deletes them.
# Writes:
#   receipts/bench-cpu-qwen3-moe-1.6b-q8_0.json, receipts/bench-cpu-qwen3-moe-1.6b-q4_k_m.json (plumb bench)
#   receipts/peer-llamacpp-cpu-qwen3-moe-1.6b.json                       (llama-bench, both files)
# Usage (hold the machine: nothing else should run): flock /tmp/plumb-cargo.lock bash tools/bench/peer-llamacpp-moe.sh
# PREP_ONLY=1 builds and converts without measuring. ACT_DTYPE=q8 runs plumb with --act-dtype q8 (Q8
# activations, as llama.cpp's CPU kernels take them); every receipt name then ends in -q8.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
threads="${THREADS:-2}"
reps="${REPS:-3}"
pp="${PP:-256}"
tg="${TG:-64}"
work="${WORK:-/tmp/plumb-moe-bench}"
act_dtype="${ACT_DTYPE:-}"
tag="${act_dtype:+-$act_dtype}"
python="$root/tools/.venv/bin/python"   # tools/fixtures/setup.sh

. "$root/tools/bench/llamacpp-build.sh"
ensure_llamacpp llama-bench llama-quantize
cd "$root"
cargo build --release -p plumb-cli
plumb="${CARGO_TARGET_DIR:-$root/target}/release/plumb"
mkdir -p "$work"
if [ ! -f "$work/hf/config.json" ]; then
    rm -rf "$work/hf"
    "$plumb" synth --arch qwen3-moe-1.6b --dtype bf16 --seed 1 "$work/hf"
fi
convert() { "$python" tools/fixtures/convert_gguf.py --llama-cpp "$llamacpp_src" "$work/hf" "$1" --outtype "$2" >/dev/null; }
[ -f "$work/q8_0.gguf" ] || convert "$work/q8_0.gguf" q8_0
if [ ! -f "$work/q4_k_m.gguf" ]; then
    [ -f "$work/bf16.gguf" ] || convert "$work/bf16.gguf" bf16
    "$bin/llama-quantize" "$work/bf16.gguf" "$work/q4_k_m.gguf" Q4_K_M "$threads" >/dev/null 2>&1
    rm -f "$work/bf16.gguf"
fi
[ -n "${PREP_ONLY:-}" ] && exit 0

peer_runs=()
for q in q8_0 q4_k_m; do
    "$plumb" bench --model "$work/$q.gguf" --threads "$threads" --repetitions "$reps" --prompt-len "$pp" \
        --gen-len "$tg" --depth 0 --receipt "receipts/bench-cpu-qwen3-moe-1.6b-$q$tag.json" \
        ${act_dtype:+--act-dtype "$act_dtype"}
    peer_runs+=("$("$bin/llama-bench" -m "$work/$q.gguf" -t "$threads" -r "$reps" -p "$pp" -n "$tg" -o json 2>/dev/null)")
done

python3 - "$work" "$threads" "$tag" "${peer_runs[@]}" <<'PY'
import hashlib, json, os, platform, subprocess, sys, time
work, threads, tag, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], [json.loads(a) for a in sys.argv[4:]]
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    return h.hexdigest()
files = {}
for q, rs in zip(["q8_0", "q4_k_m"], runs):
    path = os.path.join(work, f"{q}.gguf")
    tests = {}
    for r in rs:
        name = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        tests[name] = {"avg_tokens_per_s": r["avg_ts"], "stddev_tokens_per_s": r["stddev_ts"], "samples_ts": r.get("samples_ts")}
    files[q] = {"path": path, "sha256": sha(path), "bytes": os.path.getsize(path), "model_type": rs[0].get("model_type"), "tests": tests}
receipt = {
    "kind": "peer-bench",
    "peer": "llama.cpp llama-bench (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_NATIVE)",
    "command": ("ACT_DTYPE=" + tag[1:] + " " if tag else "") + "flock /tmp/plumb-cargo.lock bash tools/bench/peer-llamacpp-moe.sh",
    "commit": commit,
    "machine": {"cpu": cpu, "logical_cores": os.cpu_count(), "os": platform.system().lower(), "arch": platform.machine()},
    "model": "plumb synth --arch qwen3-moe-1.6b --dtype bf16 --seed 1, converted by llama.cpp's convert_hf_to_gguf.py (q8_0; bf16 then llama-quantize Q4_K_M)",
    "unix_time": int(time.time()),
    "evidence_origin": "current_invocation",
    "figures": {"threads": threads, "build_commit": runs[0][0].get("build_commit"), "files": files},
}
open(f"receipts/peer-llamacpp-cpu-qwen3-moe-1.6b{tag}.json", "w").write(json.dumps(receipt, indent=2) + "\n")
for q in ["q8_0", "q4_k_m"]:
    p = json.load(open(f"receipts/bench-cpu-qwen3-moe-1.6b-{q}{tag}.json"))["figures"]
    for t in sorted(files[q]["tests"]):
        mine = p.get(f"{t}_tokens_per_s")
        peer = files[q]["tests"][t]["avg_tokens_per_s"]
        print(f"{q:<7} {t:<6} plumb {mine:8.2f}  llama.cpp {peer:8.2f}  ratio {mine / peer:.2f}")
PY
if [ -n "${CLEAN:-}" ]; then rm -rf "$work"; fi
