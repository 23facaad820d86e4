#!/usr/bin/env python3
"""Concurrent streaming client for llama.cpp's llama-server, for tools/bench/peer-llamaserver.sh.

Standard library only. Measures one concurrency level against a running server the way
`plumb bench --concurrency` measures its lanes engine (crates/cli/src/bench_lanes.rs): N
requests of distinct random token-id prompts submitted at once, greedy, end-of-turn ignored,
every streamed token timestamped from the submission of the round; the figures use the same
definitions (aggregate, decode and steady tokens/s, nearest-rank TTFT and ITL percentiles).

Subcommands:
  vocab   MODEL.gguf                    print the vocabulary size read from the GGUF header
  level   --port P --concurrency N ...  wait for /health, warm up, time one round, write figures
  receipt --out FILE ...                assemble the peer receipt from the level files
  table   PLUMB.json PEER.json          print plumb and llama-server side by side
Only loopback addresses are contacted; every socket operation has a timeout and every request
an overall deadline.
"""
import argparse
import hashlib
import http.client
import json
import math
import os
import platform
import random
import re
import struct
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"


def die(msg):
    print(f"llamaserver_client: {msg}", file=sys.stderr)
    sys.exit(1)


# ---------------------------------------------------------------- GGUF vocabulary size

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_vocab_size(path):
    """Length of the tokenizer.ggml.tokens array in a GGUF file (v2/v3 header)."""
    with open(path, "rb") as f:
        def u32():
            return struct.unpack("<I", f.read(4))[0]

        def u64():
            return struct.unpack("<Q", f.read(8))[0]

        def string():
            return f.read(u64())

        def skip(t):
            if t in _SCALAR:
                f.seek(_SCALAR[t], 1)
            elif t == 8:
                f.seek(u64(), 1)
            elif t == 9:
                et, count = u32(), u64()
                if et in _SCALAR:
                    f.seek(_SCALAR[et] * count, 1)
                else:
                    for _ in range(count):
                        skip(et)
            else:
                raise ValueError(f"unknown GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        if u32() < 2:
            raise ValueError("GGUF v1 is not supported")
        u64()  # tensor count
        for _ in range(u64()):
            key, t = string(), u32()
            if key == b"tokenizer.ggml.tokens" and t == 9:
                u32()
                return u64()
            skip(t)
    raise ValueError(f"{path} has no tokenizer.ggml.tokens")


# ---------------------------------------------------------------- figures (as bench_lanes.rs)

def percentile_ms(v, q):
    """Nearest rank: the ceil(q*n)-th smallest value, rank clamped to [1, n], in milliseconds."""
    if not v:
        return 0.0
    s = sorted(v)
    rank = min(max(math.ceil(q * len(s)), 1), len(s))
    return s[rank - 1] * 1e3


def percentiles(v):
    return {"p50": percentile_ms(v, 0.5), "p90": percentile_ms(v, 0.9), "p99": percentile_ms(v, 0.99)}


def figures(n, reqs):
    """reqs: one list of token timestamps (seconds from the round's submission) per request."""
    generated = sum(len(r) for r in reqs)
    end = max((r[-1] for r in reqs if r), default=0.0)
    firsts = [r[0] if r else 0.0 for r in reqs]
    first = min(firsts)
    itl = [b - a for r in reqs for a, b in zip(r, r[1:])]
    # Steady state: from the moment every request is decoding to the moment the first finishes;
    # tokens with all_decoding < t <= first_done, over that span (None when the span is empty).
    all_decoding = max(firsts)
    first_done = min((r[-1] for r in reqs if r), default=math.inf)
    in_window = sum(1 for r in reqs for x in r if all_decoding < x <= first_done)
    steady = in_window / (first_done - all_decoding) if first_done > all_decoding else None
    return {
        "concurrency": n,
        "generated_tokens": generated,
        "wall_secs": end,
        "aggregate_tokens_per_s": generated / end,
        "aggregate_decode_tokens_per_s": (generated - len(reqs)) / (end - first),
        "steady_decode_tokens_per_s": steady,
        "ttft_ms": percentiles(firsts),
        "itl_ms": percentiles(itl),
    }


# ---------------------------------------------------------------- HTTP

def server_alive(pid):
    if pid is None:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has exited
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def wait_healthy(port, pid, timeout):
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if not server_alive(pid):
            die(f"llama-server (pid {pid}) exited before it was ready")
        try:
            c = http.client.HTTPConnection(HOST, port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            body = r.read()
            c.close()
            if r.status == 200 and json.loads(body or b"{}").get("status") == "ok":
                return
            last = f"HTTP {r.status} {body[:200]!r}"
        except (OSError, http.client.HTTPException, ValueError) as e:
            last = repr(e)
        time.sleep(0.2)
    die(f"llama-server on port {port} not ready after {timeout} s ({last})")


class StreamError(Exception):
    pass


def stream_completion(conn, body, t0, deadline, gen_len, prompt_len):
    """Sends one streaming /completion request on an open connection; returns the timestamp of
    every generated token (seconds after t0) and the number of tokens that arrived merged into a
    later chunk (llama-server holds a token back while its text is an incomplete UTF-8 sequence)."""
    conn.request("POST", "/completion", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise StreamError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
    times, decoded, held_back, chunks, final = [], 0, 0, 0, None
    while final is None:
        line = resp.readline()
        now = time.perf_counter() - t0
        if time.monotonic() > deadline:
            raise StreamError("request deadline passed")
        if not line:
            raise StreamError(f"stream ended after {decoded} tokens without a final event")
        line = line.strip()
        if not line:
            continue
        if line.startswith(b"error:"):
            raise StreamError(line.decode(errors="replace"))
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            raise StreamError(f"[DONE] after {decoded} tokens without a final event")
        ev = json.loads(payload)
        if "error" in ev:
            raise StreamError(json.dumps(ev["error"]))
        n = ev.get("tokens_predicted")
        if n is None:
            raise StreamError(f"event without tokens_predicted: {payload[:300]!r}")
        if n < decoded:
            raise StreamError(f"tokens_predicted went back from {decoded} to {n}")
        if not ev.get("stop") and n == decoded:
            raise StreamError(f"a chunk without a new token: {payload[:300]!r}")
        if n > decoded:
            if not ev.get("stop"):
                chunks += 1
                if len(ev.get("tokens") or []) != 1:
                    raise StreamError(f"a chunk with tokens {ev.get('tokens')!r}")
            held_back += n - decoded - 1
            times.extend([now] * (n - decoded))
            decoded = n
        if ev.get("stop"):
            final = ev
    resp.close()
    timings = final.get("timings") or {}
    problems = []
    if final.get("stop_type") != "limit":
        problems.append(f"stop_type {final.get('stop_type')!r}, expected 'limit'")
    if len(times) != gen_len or decoded != gen_len:
        problems.append(f"{len(times)} tokens streamed ({decoded} counted), expected {gen_len}")
    if timings.get("predicted_n", gen_len) != gen_len:
        problems.append(f"timings.predicted_n {timings.get('predicted_n')}, expected {gen_len}")
    if final.get("tokens_evaluated", prompt_len) != prompt_len:
        problems.append(f"tokens_evaluated {final.get('tokens_evaluated')}, expected {prompt_len}")
    if timings.get("cache_n", 0) != 0:
        problems.append(f"{timings.get('cache_n')} prompt tokens came from the cache")
    if problems:
        raise StreamError("; ".join(problems))
    return times, held_back, chunks, timings


def concurrent(port, n, call, timeout):
    """Runs call(conn, i, t0, deadline) for i in 0..n at once, one thread and one connection each
    (connected beforehand); t0 is the moment of submission. Returns the results; any failure ends
    the run."""
    conns = []
    for _ in range(n):
        c = http.client.HTTPConnection(HOST, port, timeout=timeout)
        c.connect()
        conns.append(c)
    go = threading.Event()
    results, errors = [None] * n, [None] * n
    t0_box = [0.0]

    def worker(i):
        go.wait()
        try:
            results[i] = call(conns[i], i, t0_box[0], time.monotonic() + timeout)
        except Exception as e:  # noqa: BLE001 - reported below, the run fails
            errors[i] = f"{type(e).__name__}: {e}"
        finally:
            conns[i].close()

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    t0_box[0] = time.perf_counter()
    go.set()
    for t in threads:
        t.join(timeout + 30)
        if t.is_alive():
            die("a client thread did not finish within its deadline")
    bad = [f"request {i}: {e}" for i, e in enumerate(errors) if e]
    if bad:
        die("round failed:\n  " + "\n  ".join(bad))
    return results


def run_round(port, prompts, gen_len, extra, timeout):
    """N requests at once; timestamps from submission."""
    def call(conn, i, t0, deadline):
        body = {"prompt": prompts[i], "n_predict": gen_len, "ignore_eos": True, "temperature": 0,
                "cache_prompt": False, "stream": True, **extra}
        return stream_completion(conn, body, t0, deadline, gen_len, len(prompts[i]))

    return concurrent(port, len(prompts), call, timeout)


def tokens(n, vocab, seed):
    """n token ids in [100, vocab), deterministic from seed (ids below 100 hold special tokens)."""
    rng = random.Random(seed)
    return [rng.randrange(100, vocab) for _ in range(n)]


def cmd_level(a):
    extra = json.loads(a.extra_body) if a.extra_body else {}
    wait_healthy(a.port, a.server_pid, a.health_timeout)
    run_round(a.port, [tokens(8, a.vocab, 99)], 2, extra, a.timeout)  # warm-up, not timed
    # Distinct prompts (seeds as plumb's: 10000 * (level index + 1) + request index).
    prompts = [tokens(a.prompt_len, a.vocab, 10_000 * (a.level_index + 1) + i) for i in range(a.concurrency)]
    if len({tuple(p) for p in prompts}) != len(prompts):
        die("prompts are not distinct")
    res = run_round(a.port, prompts, a.gen_len, extra, a.timeout)
    f = figures(a.concurrency, [r[0] for r in res])
    f["held_back_tokens"] = sum(r[1] for r in res)
    f["stream_chunks"] = sum(r[2] for r in res)
    f["server_prompt_ms_mean"] = sum(r[3].get("prompt_ms", 0.0) for r in res) / len(res)
    f["server_predicted_per_token_ms_mean"] = sum(r[3].get("predicted_per_token_ms", 0.0) for r in res) / len(res)
    if a.server_args:
        f["server_args"] = json.loads(a.server_args)
    with open(a.out, "w") as fh:
        json.dump(f, fh, indent=2)
    print(f"{a.concurrency:>3} concurrent: {f['aggregate_tokens_per_s']:7.1f} tokens/s aggregate, "
          f"{f['aggregate_decode_tokens_per_s']:.1f} decoding ({(f['steady_decode_tokens_per_s'] or 0):.1f} steady), "
          f"TTFT p50 {f['ttft_ms']['p50']:.0f} ms, ITL p50 {f['itl_ms']['p50']:.1f} ms p99 {f['itl_ms']['p99']:.1f} ms"
          + (f"  [{f['held_back_tokens']} tokens merged into later chunks]" if f["held_back_tokens"] else ""),
          file=sys.stderr)


# ---------------------------------------------------------------- receipt and table

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cmd_receipt(a):
    levels = [json.load(open(p)) for p in a.levels]
    version = subprocess.run([a.server_bin, "--version"], capture_output=True, text=True, timeout=60)
    text = version.stdout + version.stderr
    m = re.search(r"commit ([0-9a-f]+)", text)
    build = m.group(1) if m else None
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    receipt = {
        "kind": "peer-bench-concurrency",
        "peer": "llama.cpp llama-server (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_NATIVE), "
                "native /completion endpoint, streaming, one client thread per request",
        "command": a.command,
        "commit": commit,
        "machine": {"cpu": cpu, "logical_cores": os.cpu_count(), "os": platform.system().lower(),
                    "arch": platform.machine()},
        "model": {"path": a.model, "sha256": sha256_file(a.model)},
        "unix_time": int(time.time()),
        "evidence_origin": "current_invocation",
        "figures": {
            "threads": a.threads,
            "prompt_len": a.prompt_len,
            "gen_len": a.gen_len,
            "sampling": "greedy, end-of-turn ignored",
            "build_commit": build,
            "request": {"n_predict": a.gen_len, "ignore_eos": True, "temperature": 0, "cache_prompt": False,
                        "stream": True, **(json.loads(a.extra_body) if a.extra_body else {})},
            "vocab": a.vocab,
            "levels": levels,
        },
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as fh:
        fh.write(json.dumps(receipt, indent=2) + "\n")
    print(f"receipt written to {a.out}", file=sys.stderr)


def cmd_table(a):
    p = json.load(open(a.plumb))["figures"]["levels"]
    q = {l["concurrency"]: l for l in json.load(open(a.peer))["figures"]["levels"]}

    def num(x, fmt):
        return format(x, fmt) if isinstance(x, (int, float)) else "-"

    print(f"{'N':>3} {'engine':<12} {'agg tok/s':>9} {'decode':>8} {'steady':>8} "
          f"{'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8}")
    for lp in p:
        n = lp["concurrency"]
        for name, l in (("plumb", lp), ("llama-server", q.get(n))):
            if l is None:
                continue
            print(f"{n:>3} {name:<12} {num(l['aggregate_tokens_per_s'], '9.1f')} "
                  f"{num(l['aggregate_decode_tokens_per_s'], '8.1f')} {num(l.get('steady_decode_tokens_per_s'), '8.1f')} "
                  f"{num(l['ttft_ms']['p50'], '9.0f')} {num(l['ttft_ms']['p99'], '9.0f')} "
                  f"{num(l['itl_ms']['p50'], '8.1f')} {num(l['itl_ms']['p99'], '8.1f')}")
        if n in q:
            print(f"{'':>3} {'ratio':<12} {lp['aggregate_tokens_per_s'] / q[n]['aggregate_tokens_per_s']:9.2f}")
    print("(tokens/s; TTFT and ITL in ms; ratio = plumb / llama-server aggregate tokens/s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    v = sub.add_parser("vocab")
    v.add_argument("model")

    l = sub.add_parser("level")
    l.add_argument("--port", type=int, required=True)
    l.add_argument("--concurrency", type=int, required=True)
    l.add_argument("--level-index", type=int, default=0)
    l.add_argument("--prompt-len", type=int, required=True)
    l.add_argument("--gen-len", type=int, required=True)
    l.add_argument("--vocab", type=int, required=True)
    l.add_argument("--server-pid", type=int)
    l.add_argument("--server-args", help="JSON list recorded in the figures")
    l.add_argument("--extra-body", help="JSON object merged into every request body")
    l.add_argument("--health-timeout", type=float, default=300)
    l.add_argument("--timeout", type=float, default=600, help="seconds per socket operation and per request")
    l.add_argument("--out", required=True)

    r = sub.add_parser("receipt")
    r.add_argument("--out", required=True)
    r.add_argument("--model", required=True)
    r.add_argument("--server-bin", required=True)
    r.add_argument("--command", required=True)
    r.add_argument("--threads", type=int, required=True)
    r.add_argument("--prompt-len", type=int, required=True)
    r.add_argument("--gen-len", type=int, required=True)
    r.add_argument("--vocab", type=int, required=True)
    r.add_argument("--extra-body")
    r.add_argument("levels", nargs="+")

    t = sub.add_parser("table")
    t.add_argument("plumb")
    t.add_argument("peer")

    a = ap.parse_args()
    if a.cmd == "vocab":
        print(gguf_vocab_size(a.model))
    elif a.cmd == "level":
        if a.concurrency < 1 or a.prompt_len < 1 or a.gen_len < 1:
            die("concurrency, prompt length and generation length must be positive")
        cmd_level(a)
    elif a.cmd == "receipt":
        cmd_receipt(a)
    else:
        cmd_table(a)


if __name__ == "__main__":
    main()
