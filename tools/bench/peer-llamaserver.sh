#!/usr/bin/env bash
# Same-run CPU comparison of plumb and llama.cpp's llama-server on N concurrent streaming requests.
# llama.cpp (commit 0c1e570, as vendored in the PyPI sdist llama-cpp-python==0.3.36) is built in
# /tmp as a peer to measure against (the build directory of peer-llamacpp.sh, plus the
# llama-server target); none of it is committed. For each level N, llama-server is started with N
# slots, warmed up, sent N requests at once (distinct random token-id prompts of PROMPT_LEN,
# GEN_LEN tokens each, greedy, end-of-turn ignored, streamed; tools/bench/llamaserver_client.py)
# and stopped; then plumb bench --concurrency runs the same levels. Writes:
#   $OUT_DIR/peer-llamaserver-cpu.json     (llama-server, measured first)
#   $OUT_DIR/bench-concurrency-cpu.json    (plumb bench --concurrency, right after)
#   $OUT_DIR/concurrency-cpu.svg           (both drawn together)
# Usage: bash tools/bench/peer-llamaserver.sh   (from the repository root; takes several minutes)
# Settings (environment): THREADS=2 PROMPT_LEN=128 GEN_LEN=128 LEVELS=1,4,8,16 OUT_DIR=receipts
#   ACT_DTYPE=q8 / KV_DTYPE=f16: plumb runs with --act-dtype q8 (Q8 activations, as llama.cpp's CPU
#     kernels take them) / --kv-dtype f16 (llama.cpp's default KV type); the three files then end
#     in -q8, -kv-f16 or -q8-kv-f16 (peer-llamaserver-cpu-q8-kv-f16.json, ...)
#   PORT=18089 (loopback only)  MODEL=path.gguf (default: plumb pull's default model)
#   PEER_ONLY=1: measure llama-server only (no cargo, no plumb bench; needs MODEL or a built plumb)
#   BATCH / UBATCH: llama-server -b / -ub (default: llama-server's own, 2048 / 512)
#   STEP_TOKENS: passed to plumb bench --step-tokens (default: plumb's own)
#   EXTRA_BODY: JSON object merged into every request, e.g. '{"samplers":["top_k"],"top_k":1}'
#   REQUEST_TIMEOUT=600 (seconds per request and per socket read)  PEER_DIR=/tmp/plumb-peer-llamacpp
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="${PEER_DIR:-/tmp/plumb-peer-llamacpp}"
threads="${THREADS:-2}"
prompt_len="${PROMPT_LEN:-128}"
gen_len="${GEN_LEN:-128}"
levels="${LEVELS:-1,4,8,16}"
out_dir="${OUT_DIR:-receipts}"
port="${PORT:-18089}"
timeout="${REQUEST_TIMEOUT:-600}"
extra_body="${EXTRA_BODY:-}"
act_dtype="${ACT_DTYPE:-}"
kv_dtype="${KV_DTYPE:-}"
tag="${act_dtype:+-$act_dtype}${kv_dtype:+-kv-$kv_dtype}"
client="$root/tools/bench/llamaserver_client.py"

. "$root/tools/bench/llamacpp-build.sh"
. "$root/tools/bench/servers.sh"
ensure_llamacpp llama-server
cd "$root"
plumb="$root/target/release/plumb"
if [ "${PEER_ONLY:-0}" != 1 ]; then
    cargo build --release -p plumb-cli
fi
if [ -n "${MODEL:-}" ]; then
    model="$MODEL"
else
    [ -x "$plumb" ] || { echo "no $plumb: build it or set MODEL" >&2; exit 1; }
    model="$("$plumb" pull | sed -n 's/.* ready at //p')"
fi
[ -f "$model" ] || { echo "model not found: '$model'" >&2; exit 1; }
vocab="$(python3 "$client" vocab "$model")"

port_free "$port"

tmp="$(mktemp -d)"
client_pid=""
trap '[ -n "$client_pid" ] && kill "$client_pid" 2>/dev/null; stop_server; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

IFS=, read -ra level_list <<<"$levels"
level_files=()
i=0
for n in "${level_list[@]}"; do
    # -np N: N slots, one per request. -c: the KV cache is split evenly between slots (not unified
    # when -np is given), so each slot holds PROMPT_LEN + GEN_LEN + 16 tokens. -cb: continuous
    # batching (the default in this version, stated explicitly). --cache-ram 0: no host-memory
    # prompt cache (no prompt repeats, and saving idle slots into it would only add work).
    args=(-m "$model" -t "$threads" -np "$n" -c "$((n * (prompt_len + gen_len + 16)))" -cb --cache-ram 0
          --host 127.0.0.1 --port "$port")
    [ -n "${BATCH:-}" ] && args+=(-b "$BATCH")
    [ -n "${UBATCH:-}" ] && args+=(-ub "$UBATCH")
    log="$work/llama-server-n$n.log"
    "$bin/llama-server" "${args[@]}" >"$log" 2>&1 &
    server_pid=$!
    args_json="$(python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "${args[@]}")"
    # In the background and waited for, so that a signal to this script stops it at once.
    python3 "$client" level --port "$port" --server-pid "$server_pid" --concurrency "$n" \
        --level-index "$i" --prompt-len "$prompt_len" --gen-len "$gen_len" --vocab "$vocab" \
        --timeout "$timeout" --server-args "$args_json" ${extra_body:+--extra-body "$extra_body"} \
        --out "$tmp/level-$i.json" &
    client_pid=$!
    rc=0
    wait "$client_pid" || rc=$?
    client_pid=""
    if [ "$rc" != 0 ]; then
        echo "llama-server at concurrency $n failed; the end of $log:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
    stop_server
    level_files+=("$tmp/level-$i.json")
    i=$((i + 1))
done

command="bash tools/bench/peer-llamaserver.sh"
for v in THREADS PROMPT_LEN GEN_LEN LEVELS BATCH UBATCH STEP_TOKENS EXTRA_BODY MODEL ACT_DTYPE KV_DTYPE; do
    val="${!v:-}"
    [ -z "$val" ] && continue
    [[ "$val" =~ ^[A-Za-z0-9_,./:+=-]+$ ]] || val="$(printf '%q' "$val")"
    command="$v=$val $command"
done
mkdir -p "$out_dir"
python3 "$client" receipt --out "$out_dir/peer-llamaserver-cpu$tag.json" --model "$model" \
    --server-bin "$bin/llama-server" --command "$command" --threads "$threads" \
    --prompt-len "$prompt_len" --gen-len "$gen_len" --vocab "$vocab" \
    ${extra_body:+--extra-body "$extra_body"} "${level_files[@]}"

if [ "${PEER_ONLY:-0}" = 1 ]; then
    exit 0
fi

plumb_args=(bench --concurrency "$levels" --prompt-len "$prompt_len" --gen-len "$gen_len" --threads "$threads"
            --receipt "$out_dir/bench-concurrency-cpu$tag.json" --plot "$out_dir/concurrency-cpu$tag.svg"
            --peer "$out_dir/peer-llamaserver-cpu$tag.json")
[ -n "$act_dtype" ] && plumb_args+=(--act-dtype "$act_dtype")
[ -n "$kv_dtype" ] && plumb_args+=(--kv-dtype "$kv_dtype")
[ -n "${MODEL:-}" ] && plumb_args+=(--model "$MODEL")
[ -n "${STEP_TOKENS:-}" ] && plumb_args+=(--step-tokens "$STEP_TOKENS")
"$plumb" "${plumb_args[@]}"

python3 "$client" table "$out_dir/bench-concurrency-cpu$tag.json" "$out_dir/peer-llamaserver-cpu$tag.json"
