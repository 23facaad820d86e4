#!/usr/bin/env bash
# Same-run comparison of `plumb serve` and llama.cpp's llama-server behind the OpenAI API: for each
# level N, each server is started with N slots/lanes, warmed up, sent N concurrent streaming
# /v1/completions requests (distinct random token-id prompts of PROMPT_LEN, GEN_LEN tokens each,
# greedy, end-of-turn banned with logit_bias; tools/bench/serve_client.py sends the same bytes to
# both) and stopped. llama-server is built in /tmp by llamacpp-build.sh (nothing of it is committed).
# Writes $OUT_DIR/serve-cpu.json (both servers, every level, and their ratios).
# Usage: bash tools/bench/peer-serve.sh   (from the repository root; takes several minutes)
# Settings (environment): THREADS=2 PROMPT_LEN=128 GEN_LEN=64 LEVELS=1,8,32 OUT_DIR=receipts PORT=18090
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
threads="${THREADS:-2}"
prompt_len="${PROMPT_LEN:-128}"
gen_len="${GEN_LEN:-64}"
levels="${LEVELS:-1,8,32}"
out_dir="${OUT_DIR:-receipts}"
port="${PORT:-18090}"
client="$root/tools/bench/serve_client.py"

. "$root/tools/bench/llamacpp-build.sh"
. "$root/tools/bench/servers.sh"
ensure_llamacpp llama-server
cd "$root"
cargo build --release -p plumb-cli
plumb="$root/target/release/plumb"
model="$("$plumb" pull | sed -n 's/.* ready at //p')"
vocab="$(python3 "$root/tools/bench/llamaserver_client.py" vocab "$model")"
eog="$("$plumb" inspect --json "$model" | python3 -c 'import json, sys; print(",".join(sorted({str(t["id"]) for t in json.load(sys.stdin)["special_tokens"] if t["role"] == "end of generation"})))')"
name=smollm2
port_free "$port"

tmp="$(mktemp -d)"
trap 'stop_server; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

IFS=, read -ra level_list <<<"$levels"
plumb_files=()
peer_files=()
i=0
for n in "${level_list[@]}"; do
    ctx=$((n * (prompt_len + gen_len + 16)))
    # llama-server: N slots sharing a KV cache of N full requests, continuous batching, no prompt cache.
    peer_args=(-m "$model" -t "$threads" -np "$n" -c "$ctx" -cb --cache-ram 0 --alias "$name" --host 127.0.0.1 --port "$port")
    "$bin/llama-server" "${peer_args[@]}" >"$tmp/llama-server-$n.log" 2>&1 &
    server_pid=$!
    python3 "$client" level --port "$port" --model "$name" --eog "$eog" --server llama-server --concurrency "$n" \
        --level-index "$i" --prompt-len "$prompt_len" --gen-len "$gen_len" --vocab "$vocab" --out "$tmp/peer-$i.json" \
        || { tail -n 30 "$tmp/llama-server-$n.log" >&2; exit 1; }
    stop_server
    # plumb serve: N lanes and the same KV room.
    plumb_args=(serve -m "$model" -t "$threads" --max-lanes "$n" --kv-tokens "$ctx" --ctx "$((prompt_len + gen_len + 16))"
                --served-model-name "$name" --port "$port")
    "$plumb" "${plumb_args[@]}" >"$tmp/plumb-$n.log" 2>&1 &
    server_pid=$!
    python3 "$client" level --port "$port" --model "$name" --eog "$eog" --server plumb --concurrency "$n" \
        --level-index "$i" --prompt-len "$prompt_len" --gen-len "$gen_len" --vocab "$vocab" --out "$tmp/plumb-$i.json" \
        || { tail -n 30 "$tmp/plumb-$n.log" >&2; exit 1; }
    stop_server
    peer_files+=("$tmp/peer-$i.json")
    plumb_files+=("$tmp/plumb-$i.json")
    i=$((i + 1))
done

json_list() { python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@"; }
command="bash tools/bench/peer-serve.sh"
for v in THREADS PROMPT_LEN GEN_LEN LEVELS; do
    [ -n "${!v:-}" ] && command="$v=${!v} $command"
done
mkdir -p "$out_dir"
python3 "$client" receipt --out "$out_dir/serve-cpu.json" --command "$command" --plumb-bin "$plumb" \
    --model-path "$model" --threads "$threads" --prompt-len "$prompt_len" --gen-len "$gen_len" \
    --plumb-args "$(json_list "${plumb_args[@]}")" --peer-args "$(json_list "${peer_args[@]}")" \
    --plumb "${plumb_files[@]}" --peer "${peer_files[@]}"
