#!/usr/bin/env bash
# Same-run CPU comparison of plumb and llama.cpp on the default model.
# llama.cpp (commit 0c1e570, as vendored in the PyPI sdist llama-cpp-python==0.3.36) is built in
# /tmp as a peer to measure against; none of it is committed. Writes two receipts:
#   receipts/bench-cpu-smollm2.json    (plumb bench)
#   receipts/peer-llamacpp-cpu.json    (llama-bench, same tests, measured right after)
# Usage: bash tools/bench/peer-llamacpp.sh   (from the repository root; takes a few minutes)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
threads="${THREADS:-2}"
reps="${REPS:-5}"
plumb_receipt="${PLUMB_RECEIPT:-receipts/bench-cpu-smollm2.json}"
peer_receipt="${PEER_RECEIPT:-receipts/peer-llamacpp-cpu.json}"
act_dtype="${ACT_DTYPE:-}"

. "$root/tools/bench/llamacpp-build.sh"
ensure_llamacpp llama-bench llama-perplexity
cd "$root"
cargo build --release -p plumb-cli
plumb="$root/target/release/plumb"
model="$("$plumb" pull | sed -n 's/.* ready at //p')"

"$plumb" bench --threads "$threads" --repetitions "$reps" ${act_dtype:+--act-dtype "$act_dtype"} --receipt "$plumb_receipt"
peer_json="$("$bin/llama-bench" -m "$model" -t "$threads" -r "$reps" -p 512 -n 128 -d 0,512 -o json 2>/dev/null)"

python3 - "$peer_json" "$model" "$threads" "$peer_receipt" <<'PY'
import json, subprocess, sys, time, hashlib, platform, os
runs = json.loads(sys.argv[1])
model, threads, out = sys.argv[2], int(sys.argv[3]), sys.argv[4]
figures = {"threads": threads, "build_commit": runs[0].get("build_commit"), "tests": []}
for r in runs:
    name = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + (f"_at_depth{r['n_depth']}" if r.get("n_depth") else "")
    figures["tests"].append({"test": name, "avg_tokens_per_s": r["avg_ts"], "stddev_tokens_per_s": r["stddev_ts"], "samples_ts": r.get("samples_ts")})
    figures[f"{name}_tokens_per_s"] = r["avg_ts"]
sha = hashlib.sha256(open(model, "rb").read()).hexdigest()
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
receipt = {
    "kind": "peer-bench",
    "peer": "llama.cpp llama-bench (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_NATIVE)",
    "command": "bash tools/bench/peer-llamacpp.sh",
    "commit": commit,
    "machine": {"cpu": cpu, "logical_cores": os.cpu_count(), "os": platform.system().lower(), "arch": platform.machine()},
    "model": {"path": model, "sha256": sha},
    "unix_time": int(time.time()),
    "evidence_origin": "current_invocation",
    "figures": figures,
}
open(out, "w").write(json.dumps(receipt, indent=2) + "\n")
PY

python3 - "$plumb_receipt" "$peer_receipt" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["figures"]
q = json.load(open(sys.argv[2]))["figures"]
rows = [("pp512", "pp512_tokens_per_s", "pp512_tokens_per_s"),
        ("tg128", "tg128_tokens_per_s", "tg128_tokens_per_s"),
        ("tg128 @ depth 512", "tg128_at_depth512_tokens_per_s", "tg128_at_depth512_tokens_per_s")]
for name, a, b in rows:
    print(f"{name:<18} plumb {p[a]:8.1f}  llama.cpp {q[b]:8.1f}  ratio {p[a] / q[b]:.2f}")
PY
