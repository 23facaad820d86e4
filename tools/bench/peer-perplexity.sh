#!/usr/bin/env bash
# Same-run perplexity of plumb and llama.cpp's llama-perplexity on one text, chunks of 512 tokens.
# Text: Debian's /usr/share/common-licenses/GPL-3 (override with TEXT=...). Needs the llama.cpp
# build that tools/bench/peer-llamacpp.sh makes in /tmp. Writes:
#   receipts/perplexity-cpu-gpl3.json         (plumb, CPU backend)
#   receipts/peer-llamacpp-perplexity.json    (llama-perplexity, same text, same run)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
text="${TEXT:-/usr/share/common-licenses/GPL-3}"
work="${PEER_DIR:-/tmp/plumb-peer-llamacpp}"
bin="$work/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin"
[ -x "$bin/llama-perplexity" ] || { echo "build llama.cpp first: bash tools/bench/peer-llamacpp.sh" >&2; exit 1; }
export LD_LIBRARY_PATH="$bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
cd "$root"
cargo build --release -p plumb-cli
plumb="$root/target/release/plumb"
model="$("$plumb" pull | sed -n 's/.* ready at //p')"
"$plumb" perplexity --receipt receipts/perplexity-cpu-gpl3.json "$text"
out="$("$bin/llama-perplexity" -m "$model" -f "$text" -c 512 -t 2 2>&1)"
python3 - "$out" "$model" "$text" <<'PY'
import hashlib, json, os, platform, re, subprocess, sys, time
out, model, text = sys.argv[1:4]
ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", out).group(1))
chunks = int(re.search(r"calculating perplexity over (\d+) chunks", out).group(1))
sha = lambda p: hashlib.sha256(open(p, "rb").read()).hexdigest()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
receipt = {
    "kind": "peer-perplexity",
    "peer": "llama.cpp llama-perplexity (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_NATIVE)",
    "command": "bash tools/bench/peer-perplexity.sh",
    "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
    "machine": {"cpu": cpu, "logical_cores": os.cpu_count(), "os": platform.system().lower(), "arch": platform.machine()},
    "model": {"path": model, "sha256": sha(model)},
    "unix_time": int(time.time()),
    "evidence_origin": "current_invocation",
    "figures": {"text": {"path": text, "sha256": sha(text)}, "chunk": 512, "chunks": chunks, "perplexity": ppl},
}
open("receipts/peer-llamacpp-perplexity.json", "w").write(json.dumps(receipt, indent=2) + "\n")
mine = json.load(open("receipts/perplexity-cpu-gpl3.json"))["figures"]["perplexity"]
print(f"perplexity: plumb {mine:.4f}, llama.cpp {ppl:.4f} ({chunks} chunks)")
PY
