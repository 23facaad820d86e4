#!/usr/bin/env bash
# serve-run.sh — `plumb serve --device cuda` on a GPU machine, from a prebuilt binary: a chat answer,
# a streamed answer, /metrics, and N concurrent streaming clients per level (tools/bench/serve_client.py,
# standard library only), with every log and figure in one output folder.
#
#   tools/device/serve-run.sh PLUMB_BIN MODEL.gguf OUT_DIR
#
# Settings (environment): LEVELS=1,8,32 PROMPT_LEN=128 GEN_LEN=128 PORT=18090 DEVICE=cuda
# Run it from the repository root. Exit status: non-zero if any step failed.
set -uo pipefail
BIN=${1:?usage: serve-run.sh PLUMB_BIN MODEL.gguf OUT_DIR}
MODEL=${2:?usage: serve-run.sh PLUMB_BIN MODEL.gguf OUT_DIR}
OUT=${3:?usage: serve-run.sh PLUMB_BIN MODEL.gguf OUT_DIR}
levels=${LEVELS:-1,8,32}
prompt_len=${PROMPT_LEN:-128}
gen_len=${GEN_LEN:-128}
port=${PORT:-18090}
device=${DEVICE:-cuda}
mkdir -p "$OUT"
export PLUMB_HOME=${PLUMB_HOME:-$(mktemp -d /tmp/plumb-home.XXXX)}
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
status=0
max_lanes=$(tr , '\n' <<<"$levels" | sort -n | tail -1)
"$BIN" serve --device "$device" --model "$MODEL" --served-model-name smollm2 --port "$port" \
    --max-lanes "$max_lanes" --ctx $((prompt_len + gen_len + 64)) >"$OUT/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    kill -0 $pid 2>/dev/null || { echo "plumb serve exited:"; cat "$OUT/serve.log"; exit 1; }
    sleep 0.2
done
url="http://127.0.0.1:$port/v1"
{
    echo "== chat"
    curl -s "$url/chat/completions" -H 'Content-Type: application/json' \
        -d '{"model": "smollm2", "messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 32, "temperature": 0}'
    echo
    echo "== streamed completion"
    curl -sN "$url/completions" -H 'Content-Type: application/json' \
        -d '{"model": "smollm2", "prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "stream": true}'
} >"$OUT/answers.log" 2>&1 || status=1
vocab=$(python3 tools/bench/llamaserver_client.py vocab "$MODEL")
i=0
for n in ${levels//,/ }; do
    python3 tools/bench/serve_client.py level --port "$port" --model smollm2 --eog 0,2 --server "plumb-$device" \
        --concurrency "$n" --level-index "$i" --prompt-len "$prompt_len" --gen-len "$gen_len" --vocab "$vocab" \
        --out "$OUT/level-$n.json" 2>&1 | tee -a "$OUT/levels.log" || status=1
    i=$((i + 1))
done
curl -s "http://127.0.0.1:$port/metrics" >"$OUT/metrics.txt" || status=1
kill -TERM $pid
wait $pid
echo "plumb serve exit status: $?" >>"$OUT/serve.log"
exit $status
