#!/usr/bin/env bash
# Same-run CPU comparison of plumb and llama.cpp on the default model, alternating: ROUNDS rounds
# (default 5) of one `plumb bench` run then one `llama-bench` run of the same tests (pp512, tg128,
# tg128 at depth 512), so a machine whose speed drifts over minutes (this project's does, by up
# to 2×) weighs both alike; the receipt keeps every round and the median of each side and of the
# per-round ratios. llama.cpp as in peer-llamacpp.sh (built in /tmp, none of it committed).
# Usage: [ACT_DTYPE=q8] [ROUNDS=5] [THREADS=2] bash tools/bench/peer-llamacpp-alternate.sh RECEIPT
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:?usage: peer-llamacpp-alternate.sh RECEIPT}"
threads="${THREADS:-2}"
rounds="${ROUNDS:-5}"
act_dtype="${ACT_DTYPE:-}"

. "$root/tools/bench/llamacpp-build.sh"
ensure_llamacpp llama-bench
cd "$root"
cargo build --release -p plumb-cli
plumb="$root/target/release/plumb"
model="$("$plumb" pull | sed -n 's/.* ready at //p')"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

for i in $(seq 1 "$rounds"); do
    "$plumb" bench --threads "$threads" --repetitions 1 ${act_dtype:+--act-dtype "$act_dtype"} --json >"$work/plumb-$i.json" 2>/dev/null
    "$bin/llama-bench" -m "$model" -t "$threads" -r 1 -p 512 -n 128 -d 0,512 -o json >"$work/peer-$i.json" 2>/dev/null
    echo "round $i of $rounds done" >&2
done

python3 - "$work" "$rounds" "$model" "$threads" "$act_dtype" "$out" <<'PY'
import json, os, platform, statistics, subprocess, sys, time, hashlib
work, rounds, model, threads, act, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6]
tests = [("pp512", "pp512_tokens_per_s"), ("tg128", "tg128_tokens_per_s"), ("tg128_at_depth512", "tg128_at_depth512_tokens_per_s")]
per_round = []
for i in range(1, rounds + 1):
    p = json.load(open(f"{work}/plumb-{i}.json"))["figures"]
    q = {}
    for r in json.load(open(f"{work}/peer-{i}.json")):
        name = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + (f"_at_depth{r['n_depth']}" if r.get("n_depth") else "")
        q[name] = r["avg_ts"]
    per_round.append({t: {"plumb": p[key], "llama_cpp": q[t], "ratio": p[key] / q[t]} for t, key in tests})
summary = {}
for t, _ in tests:
    summary[t] = {side: statistics.median(r[t][side] for r in per_round) for side in ("plumb", "llama_cpp", "ratio")}
    summary[t]["ratio_min"] = min(r[t]["ratio"] for r in per_round)
    summary[t]["ratio_max"] = max(r[t]["ratio"] for r in per_round)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
receipt = {
    "kind": "peer-bench-alternating",
    "peer": "llama.cpp llama-bench (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_NATIVE)",
    "command": ("ACT_DTYPE=" + act + " " if act else "") + f"ROUNDS={rounds} bash tools/bench/peer-llamacpp-alternate.sh {out}",
    "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "machine": {"cpu": cpu, "logical_cores": os.cpu_count(), "avx512f": "avx512f" in flags, "avx2": "avx2" in flags,
                "os": platform.system().lower(), "arch": platform.machine()},
    "model": {"path": model, "sha256": hashlib.sha256(open(model, "rb").read()).hexdigest()},
    "threads": threads,
    "act_dtype": act or "f32",
    "unix_time": int(time.time()),
    "evidence_origin": "current_invocation",
    "rounds": per_round,
    "median": summary,
}
open(out, "w").write(json.dumps(receipt, indent=2) + "\n")
for t, _ in tests:
    s = summary[t]
    print(f"{t:<18} plumb {s['plumb']:8.1f}  llama.cpp {s['llama_cpp']:8.1f}  ratio {s['ratio']:.2f} (rounds {s['ratio_min']:.2f}-{s['ratio_max']:.2f})")
PY
