#!/usr/bin/env python3
"""Concurrent streaming client for OpenAI-compatible servers, for tools/bench/peer-serve.sh.

Standard library only. Sends N `POST /v1/completions` requests at once to a running server
(plumb serve or llama.cpp's llama-server — the same bytes to both): distinct random token-id
prompts, greedy, end-of-turn tokens banned through `logit_bias` (an OpenAI parameter both honour)
so every request generates exactly GEN_LEN tokens, streamed with usage. Every streamed chunk is
timestamped from the round's submission; a chunk may carry several tokens when a server holds
back an incomplete UTF-8 character, so token times come from the usage count at the end, spread
over the chunks as llamaserver_client.py does. Figures use the same definitions as
`plumb bench --concurrency` (aggregate, decode and steady tokens/s; nearest-rank percentiles).

Subcommands:
  level   --port P --model ID --concurrency N ...   time one round, write its figures as JSON
  receipt --out FILE ...                            assemble both servers' levels into one receipt
"""
import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llamaserver_client import HOST, concurrent, figures, sha256_file, tokens  # noqa: E402


def die(msg):
    print(f"serve_client: {msg}", file=sys.stderr)
    sys.exit(1)


def wait_ready(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection(HOST, port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            c.close()
            if r.status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    die(f"no server ready on port {port} after {timeout} s")


def stream(conn, body, t0, deadline):
    """One streamed completion; returns chunk timestamps (one per token, see the module doc)."""
    conn.request("POST", "/v1/completions", body=json.dumps(body).encode(),
                 headers={"Content-Type": "application/json", "Accept": "text/event-stream"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
    chunk_times, usage, finish = [], None, None
    while True:
        if time.monotonic() > deadline:
            raise RuntimeError("request deadline passed")
        line = resp.readline()
        now = time.perf_counter() - t0
        if not line:
            raise RuntimeError("the stream ended without [DONE]")
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            break
        ev = json.loads(payload)
        if "error" in ev:
            raise RuntimeError(json.dumps(ev["error"]))
        if ev.get("usage"):
            usage = ev["usage"]
        for ch in ev.get("choices") or []:
            chunk_times.append(now)
            finish = ch.get("finish_reason") or finish
    resp.close()
    if usage is None:
        raise RuntimeError("no usage in the stream")
    n = usage["completion_tokens"]
    if not chunk_times or n < len(chunk_times) - 1:
        raise RuntimeError(f"{len(chunk_times)} chunks for {n} tokens")
    # Chunks beyond the count (a closing chunk with only the finish reason) carry no token.
    times = chunk_times[:n]
    times += [times[-1]] * (n - len(times))
    return times, usage, finish


def run_round(port, bodies, timeout):
    return concurrent(port, len(bodies), lambda conn, i, t0, deadline: stream(conn, bodies[i], t0, deadline), timeout)


def body(model, prompt, gen_len, eog):
    return {"model": model, "prompt": prompt, "max_tokens": gen_len, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": {str(t): -100 for t in eog}}


def cmd_level(a):
    eog = [int(x) for x in a.eog.split(",") if x]
    wait_ready(a.port, 300)
    run_round(a.port, [body(a.model, tokens(8, a.vocab, 99), 2, eog)], a.timeout)  # warm-up, not timed
    prompts = [tokens(a.prompt_len, a.vocab, 10_000 * (a.level_index + 1) + i) for i in range(a.concurrency)]
    res = run_round(a.port, [body(a.model, p, a.gen_len, eog) for p in prompts], a.timeout)
    for times, usage, finish in res:
        if usage["completion_tokens"] != a.gen_len or usage["prompt_tokens"] != a.prompt_len or finish != "length":
            die(f"a request did not run to length: usage {usage}, finish {finish!r}")
    f = figures(a.concurrency, [r[0] for r in res])
    f["server"] = a.server
    with open(a.out, "w") as fh:
        json.dump(f, fh, indent=2)
    print(f"{a.server:>12} {a.concurrency:>3} concurrent: {f['aggregate_tokens_per_s']:7.1f} tokens/s aggregate, "
          f"TTFT p50 {f['ttft_ms']['p50']:.0f} ms p99 {f['ttft_ms']['p99']:.0f} ms, "
          f"ITL p50 {f['itl_ms']['p50']:.1f} ms p99 {f['itl_ms']['p99']:.1f} ms", file=sys.stderr)


def cmd_receipt(a):
    def load(paths):
        return [json.load(open(p)) for p in paths]

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)receipts"],
                           capture_output=True, text=True).stdout.strip() != ""
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown")
    plumb, peer = load(a.plumb), load(a.peer)
    ratios = [{"concurrency": p["concurrency"],
               "aggregate_tokens_per_s": p["aggregate_tokens_per_s"] / q["aggregate_tokens_per_s"],
               "ttft_p50": p["ttft_ms"]["p50"] / q["ttft_ms"]["p50"]} for p, q in zip(plumb, peer)]
    receipt = {
        "kind": "serve-bench",
        "what": "N concurrent streaming /v1/completions clients against plumb serve and llama-server, same run, "
                "same request bytes (tools/bench/serve_client.py)",
        "command": a.command,
        "build": {"commit": commit, "dirty": dirty, "plumb_binary_sha256": sha256_file(a.plumb_bin),
                  "peer": "llama.cpp llama-server (llama-cpp-python==0.3.36 vendor/llama.cpp, Release, GGML_NATIVE)"},
        "machine": {"cpu": cpu, "logical_cores": os.cpu_count(), "os": platform.system().lower(),
                    "arch": platform.machine()},
        "model": {"path": a.model_path, "sha256": sha256_file(a.model_path)},
        "unix_time": int(time.time()),
        "figures": {
            "threads": a.threads, "prompt_len": a.prompt_len, "gen_len": a.gen_len,
            "sampling": "greedy; end-of-turn tokens banned with logit_bias -100",
            "plumb_args": json.loads(a.plumb_args), "peer_args": json.loads(a.peer_args),
            "plumb": plumb, "llama_server": peer, "ratio_plumb_over_peer": ratios,
        },
    }
    with open(a.out, "w") as fh:
        fh.write(json.dumps(receipt, indent=2) + "\n")
    print(f"{'N':>3} {'server':<13} {'agg tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} {'ITL p50':>8} {'ITL p99':>8}")
    for p, q, r in zip(plumb, peer, ratios):
        for name, l in (("plumb", p), ("llama-server", q)):
            print(f"{l['concurrency']:>3} {name:<13} {l['aggregate_tokens_per_s']:9.1f} {l['ttft_ms']['p50']:9.0f} "
                  f"{l['ttft_ms']['p99']:9.0f} {l['itl_ms']['p50']:8.1f} {l['itl_ms']['p99']:8.1f}")
        print(f"{'':>3} {'ratio':<13} {r['aggregate_tokens_per_s']:9.2f} {r['ttft_p50']:9.2f}")
    print(f"receipt written to {a.out}", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    l = sub.add_parser("level")
    for name, t in (("--port", int), ("--concurrency", int), ("--level-index", int), ("--prompt-len", int),
                    ("--gen-len", int), ("--vocab", int)):
        l.add_argument(name, type=t, required=True)
    l.add_argument("--model", required=True, help="the model id the server expects")
    l.add_argument("--eog", default="", help="comma-separated end-of-turn token ids to ban")
    l.add_argument("--server", required=True, help="a label: plumb or llama-server")
    l.add_argument("--timeout", type=float, default=600)
    l.add_argument("--out", required=True)
    r = sub.add_parser("receipt")
    for name in ("--out", "--command", "--plumb-bin", "--model-path", "--plumb-args", "--peer-args"):
        r.add_argument(name, required=True)
    for name in ("--threads", "--prompt-len", "--gen-len"):
        r.add_argument(name, type=int, required=True)
    r.add_argument("--plumb", nargs="+", required=True)
    r.add_argument("--peer", nargs="+", required=True)
    a = ap.parse_args()
    cmd_level(a) if a.cmd == "level" else cmd_receipt(a)


if __name__ == "__main__":
    main()
