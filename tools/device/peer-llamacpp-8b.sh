#!/usr/bin/env bash
# peer-llamacpp-8b.sh — llama.cpp's CUDA figures on the checkpoint bench-8b.sh measures plumb on (a
# Llama-3.1-8B-shape bf16 `plumb synth`), in one call of the device tool: llama-bench (pp2048, tg64,
# at depth 0 and 512) and llama-batched-bench (prompt 512, 256 generated, 1/8/32/64 sequences in
# parallel), the peers of `plumb bench` and `plumb bench --concurrency`. llama.cpp is the sdist
# llama-cpp-python==0.3.36's vendor/llama.cpp (commit 0c1e570); none of it is committed.
#
#   carry .gpu/llama-src.tar.xz and .gpu/plumb.xz (peer-llamacpp-cuda.sh says how they are made)
#   bash tools/device/peer-llamacpp-8b.sh          (PLUMB=path/to/plumb instead of .gpu/plumb.xz)
#   PLUMB_FIGURES=1 bash tools/device/peer-llamacpp-8b.sh   (plumb's figures too, right after)
#
# llama.cpp builds for sm_90 in the background in $WORK while `plumb synth` writes /tmp/l8b (kept
# when /tmp/l8b/config.json exists) and tools/device/hf_to_gguf.py converts it to /tmp/l8b-bf16.gguf
# (the bytes of llama.cpp's own convert_hf_to_gguf.py --outtype bf16; about 33 GB of disk in all).
# Writes to $OUT the logs, llama-bench.json, batched-bench.jsonl and the receipt
# peer-llamacpp-cuda-llama8b.json. Each phase runs under a deadline so the call ends within
# DEADLINE seconds (default 570); REPS is llama-bench's repetitions (default 5). SYNTH_ARCH, HF_DIR
# and GGUF change the model (default llama-3.1-8b, /tmp/l8b, /tmp/l8b-bf16.gguf). The build may
# run until BENCH_SECS (default 60) before the deadline (less PLUMB_SECS with PLUMB_FIGURES=1), on
# BUILD_JOBS cores (default all); WHILE_BUILDING runs a command of yours on the idle GPU meanwhile:
# measured 2026-12-03, a cold build beside `plumb synth` needed about 330 s (it had 275 s and
# stopped at 238 of 289 steps; ninja resumed it in 32 s in the next call on the warm machine),
# llama-bench and llama-batched-bench 19 s at REPS=2, plumb's figures about 75 s.
set -uo pipefail
OUT=${OUT:?OUT=folder for the results}
work=${WORK:-/tmp/plumb-peer-cuda}
src=$work/llama.cpp
bin=$src/build/bin
arch=${SYNTH_ARCH:-llama-3.1-8b}
hf=${HF_DIR:-/tmp/l8b}
gguf=${GGUF:-/tmp/l8b-bf16.gguf}
deadline=${DEADLINE:-570}
npp=512 ntg=256 npl=1,8,32,64
# Flash attention on, all layers on the GPU, the default batch (2048) and ubatch (512), f16 KV.
bench_flags="-ngl 99 -fa on -r ${REPS:-5} -p 2048 -n 64 -d 0,512"
# Each sequence has its own prompt and its own KV stream (-no-kvu, batched-bench's default), so it
# attends to its own 768 cells only, as a sequence does in plumb; a unified KV (-kvu) would make every
# sequence's attention span all 64 × 768 cells. -c holds 64 × (512 + 256): batched-bench silently
# skips a level that does not fit.
batched_flags="-ngl 99 -fa on -no-kvu -c $((${npl##*,} * (npp + ntg))) -b 2048 -ub 512 -npp $npp -ntg $ntg -npl $npl"
# With PLUMB_FIGURES=1, plumb's own figures follow llama.cpp's in the same call (below); they keep
# the last PLUMB_SECS (default 120) of the deadline.
[ "${PLUMB_FIGURES:-0}" = 1 ] && deadline=$((deadline - ${PLUMB_SECS:-120}))
# Seconds until the deadline less $1 kept for what follows; at least 1 (`timeout 0` would not stop).
left() { local s=$((deadline - SECONDS - $1)); echo $((s > 1 ? s : 1)); }
fail() { echo "peer-llamacpp-8b: $* (after ${SECONDS} s)" >&2; exit 1; }
mkdir -p "$OUT" "$work"
[ -d /usr/local/cuda/bin ] && export PATH=/usr/local/cuda/bin:$PATH

[ -f "$src/CMakeLists.txt" ] || tar -xJf .gpu/llama-src.tar.xz -C "$work" || fail "cannot unpack .gpu/llama-src.tar.xz (carry it)"
(
    timeout 120 cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF &&
        timeout "$(left "${BENCH_SECS:-60}")" cmake --build "$src/build" -j"${BUILD_JOBS:-$(nproc)}" --target llama-bench llama-batched-bench
) >"$OUT/build.log" 2>&1 &
build_pid=$!

# Meanwhile, the checkpoint and its GGUF (the build has most cores; synth takes SYNTH_THREADS).
plumb=${PLUMB:-}
if [ -z "$plumb" ]; then
    plumb=$work/plumb
    xz -dc .gpu/plumb.xz >"$plumb" && chmod +x "$plumb" || fail "no PLUMB and no .gpu/plumb.xz"
fi
bash "$(dirname "$0")/seed-kernels.sh" "$(dirname "$plumb")"
SECONDS_SYNTH=0
if [ ! -e "$hf/config.json" ]; then
    t=$SECONDS
    rm -rf "$hf"
    timeout "$(left 330)" "$plumb" synth --arch "$arch" -t "${SYNTH_THREADS:-4}" "$hf" >"$OUT/synth.log" 2>&1 ||
        { rm -rf "$hf"; fail "plumb synth failed (synth.log)"; }
    SECONDS_SYNTH=$((SECONDS - t))
    echo "synth: $(tail -1 "$OUT/synth.log") (${SECONDS_SYNTH} s)"
fi
t=$SECONDS
if [ ! -e "$gguf.done" ] || [ "$hf/config.json" -nt "$gguf.done" ]; then
    rm -f "$gguf.done"
    timeout "$(left 300)" python3 tools/device/hf_to_gguf.py "$hf" "$gguf" >"$OUT/convert.log" 2>&1 ||
        fail "conversion failed (convert.log)"
    touch "$gguf.done"
    echo "convert: $(tail -1 "$OUT/convert.log") ($((SECONDS - t)) s)"
else
    echo "convert: kept $gguf"
fi
SECONDS_CONVERT=$((SECONDS - t))

# WHILE_BUILDING: a command for the GPU, which the build leaves idle, once the checkpoint exists
# (an A/B of plumb's settings, say); it should leave the build cores (BUILD_JOBS of them).
if [ -n "${WHILE_BUILDING:-}" ]; then
    t=$SECONDS
    timeout "$(left "${BENCH_SECS:-60}")" bash -c "$WHILE_BUILDING" >"$OUT/while-building.log" 2>&1
    echo "while building: rc $? ($((SECONDS - t)) s)"
fi
t=$SECONDS
wait "$build_pid"
rc=$?
echo "build: rc $rc, done at ${SECONDS} s (waited $((SECONDS - t)) s); $(tail -1 "$OUT/build.log")"
[ "$rc" = 0 ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-batched-bench" ] || fail "build failed or ran out of time (build.log)"
SECONDS_BUILD=$SECONDS

# A failed bench is reported and leaves its figures out of the receipt.
status=0
t=$SECONDS
timeout "$(left 70)" "$bin/llama-bench" -m "$gguf" $bench_flags -o json >"$OUT/llama-bench.json" 2>"$OUT/llama-bench.log" ||
    { status=1; rm -f "$OUT/llama-bench.json"; echo "llama-bench failed (llama-bench.log)" >&2; }
SECONDS_BENCH=$((SECONDS - t))
t=$SECONDS
timeout "$(left 10)" "$bin/llama-batched-bench" -m "$gguf" $batched_flags --output-format jsonl \
    >"$OUT/batched-bench.jsonl" 2>"$OUT/batched-bench.log" ||
    { status=1; echo "llama-batched-bench failed (batched-bench.log)" >&2; }
SECONDS_BATCHED=$((SECONDS - t))
# With time to spare, pp2048 once more in a single 2048-token ubatch (the receipt's pp2048_ub2048),
# in case llama.cpp's default ubatch of 512 holds it back on this GPU.
if [ "$(left 10)" -gt 40 ]; then
    timeout "$(left 10)" "$bin/llama-bench" -m "$gguf" -ngl 99 -fa on -r "${REPS:-5}" -p 2048 -n 0 -ub 2048 \
        -o json >"$OUT/llama-bench-ub2048.json" 2>>"$OUT/llama-bench.log" || rm -f "$OUT/llama-bench-ub2048.json"
fi

python3 - "$OUT" "$gguf" "$npl" "plumb synth --arch $arch $hf" "$bench_flags" "$batched_flags" "$SECONDS_SYNTH" "$SECONDS_CONVERT" "$SECONDS_BUILD" "$SECONDS_BENCH" "$SECONDS_BATCHED" <<'PY'
import hashlib, json, os, subprocess, sys, time
out, model, npl, synth, bench_flags, batched_flags = sys.argv[1:7]
phases = dict(zip(["synth", "convert", "build_done_at", "llama_bench", "batched_bench"], map(int, sys.argv[7:12])))
def load(path):
    return json.load(open(path)) if os.path.exists(path) else []
runs = load(f"{out}/llama-bench.json")
figures = {"build_commit": runs[0].get("build_commit") if runs else None, "gpu": runs[0].get("gpu_info") if runs else None,
           "llama_bench": bench_flags + " (-b 2048 -ub 512, f16 KV: the defaults)", "tests": []}
for r in runs + [dict(x, ub=True) for x in load(f"{out}/llama-bench-ub2048.json")]:
    name = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + ("_ub2048" if r.get("ub") else "") \
        + (f"_at_depth{r['n_depth']}" if r.get("n_depth") else "")
    figures["tests"].append({"test": name, "avg_tokens_per_s": r["avg_ts"], "stddev_tokens_per_s": r["stddev_ts"],
                             "samples_ts": r.get("samples_ts")})
    figures[f"{name}_tokens_per_s"] = r["avg_ts"]
rows = [json.loads(l) for l in open(f"{out}/batched-bench.jsonl") if l.startswith("{")] \
    if os.path.exists(f"{out}/batched-bench.jsonl") else []
figures["batched_bench"] = batched_flags + " (a prompt of its own and a KV stream of its own per sequence)"
figures["levels"] = [{"concurrency": r["pl"], "prompt_len": r["pp"], "gen_len": r["tg"], "n_kv": r["n_kv"],
                      "prefill_secs": r["t_pp"], "prefill_tokens_per_s": r["speed_pp"],
                      "decode_secs": r["t_tg"], "aggregate_decode_tokens_per_s": r["speed_tg"],
                      "total_tokens_per_s": r["speed"]} for r in rows]
missing = sorted(set(map(int, npl.split(","))) - {r["pl"] for r in rows})
if missing:
    figures["levels_missing"] = missing
with open(model, "rb") as f:
    head = hashlib.sha256(f.read(64 << 20)).hexdigest()
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
receipt = {
    "kind": "peer-bench",
    "peer": "llama.cpp llama-bench and llama-batched-bench (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, "
            "GGML_CUDA, sm_90), -ngl 99 -fa on",
    "command": "bash tools/device/peer-llamacpp-8b.sh",
    "machine": {"gpu": gpu},
    "model": {"path": model, "source": f"{synth} (seed 0), converted to BF16 by tools/device/hf_to_gguf.py",
              "size_bytes": os.path.getsize(model), "sha256_first_64MiB": head,
              "sha256_note": "of the first 64 MiB only (header, metadata, tokenizer and the first tensors): "
                             "hashing all 16 GB would take a minute of the call"},
    "unix_time": int(time.time()),
    "evidence_origin": "current_invocation",
    "phases_secs": phases,
    "figures": figures,
}
open(f"{out}/peer-llamacpp-cuda-llama8b.json", "w").write(json.dumps(receipt, indent=2) + "\n")
for t in figures["tests"]:
    print(f"{t['test']:<24} {t['avg_tokens_per_s']:10.1f} tok/s ± {t['stddev_tokens_per_s']:.1f}")
for l in figures["levels"]:
    print(f"npl {l['concurrency']:>3}  prefill {l['prefill_tokens_per_s']:9.1f}  decode {l['aggregate_decode_tokens_per_s']:8.1f}"
          f"  total {l['total_tokens_per_s']:8.1f} tok/s")
if missing:
    print(f"batched-bench has no figures for npl {missing}")
PY
# plumb on the same checkpoint, right after llama.cpp on the same GPU: `plumb bench` (pp2048, tg64,
# at depth 0 and 512, f16 KV like llama.cpp's) and `plumb bench --concurrency` (the same prompt
# and generation lengths as batched-bench), its plot drawn beside llama.cpp's decode rates.
if [ "${PLUMB_FIGURES:-0}" = 1 ]; then
    deadline=$((deadline + ${PLUMB_SECS:-120}))
    timeout "$(left 70)" "$plumb" bench --device cuda --kv-dtype f16 --model "$hf" --prompt-len 2048 --gen-len 64 \
        --depth 512 --repetitions 2 --receipt "$OUT/bench-cuda-llama8b-synth.json" 2>&1 | tail -5 || status=1
    timeout "$(left 2)" "$plumb" bench --device cuda --kv-dtype f16 --model "$hf" --concurrency "$npl" \
        --prompt-len "$npp" --gen-len "$ntg" --receipt "$OUT/bench-concurrency-cuda-llama8b-synth.json" \
        --plot "$OUT/concurrency-cuda-llama8b-synth.svg" --peer "$OUT/peer-llamacpp-cuda-llama8b.json" 2>&1 |
        tail -6 || status=1
fi
echo "done in ${SECONDS} s"
exit $status
