#!/usr/bin/env python3
"""timeline.py — where a recorded step's time goes, from the CSV `PLUMB_CUDA_TIMELINE=FILE` writes
(crates/backend-cuda/src/timeline.rs: every block of every launch of the recorded decode steps,
stamped with the GPU's global timer as its thread 0 started, as its wait on the kernel before
(PDL) returned, and as it returned).

    python3 tools/device/timeline.py FILE [--steps N] [--list STEP]

A launch is a (step, grid) pair (a CUDA graph's replays keep their nodes' %gridid; the step
column numbers the recorded steps). Launches are ordered by their first block's start. For each
kernel it prints the launches a step, the mean span (first block's start to last block's end),
the mean exposed time (the part of the span past the end of every launch before it: what the
launch adds to the wall time; PDL lets a launch start before the one before it ends, and that
overlap is not exposed), the mean release (its first block's wait returning, after the end of
every launch before it: how long the dependency took to let it go) and the mean work after the
wait (last block's end less first wait's return). The exposed times add up to the recorded wall
time less the gaps, printed too. --steps (the recorded decode steps, PLUMB_CUDA_TIMELINE_STEPS'
COUNT, default 8) turns totals into per-step figures; --list STEP lists that step's launches one
by one (times in us from the step's first start).
"""
import argparse
import csv
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--list", default=None, help="list this step's launches one by one")
    a = ap.parse_args()
    launches = {}
    for row in csv.DictReader(open(a.file)):
        key = (row.get("step", "0"), row["grid"])
        g = launches.setdefault(key, {"kernel": row["kernel"], "start": None, "end": 0, "blocks": 0, "wait": None})
        s, e = int(row["start_ns"]), int(row["end_ns"])
        w = int(row.get("wait_ns") or 0)
        g["start"] = s if g["start"] is None else min(g["start"], s)
        g["end"] = max(g["end"], e)
        g["blocks"] += 1
        if w > 0:
            g["wait"] = w if g["wait"] is None else min(g["wait"], w)
        g["step"] = key[0]
    order = sorted(launches.values(), key=lambda g: g["start"])
    if not order:
        print("no launches recorded")
        return
    per = defaultdict(lambda: [0, 0, 0, 0, 0, 0])  # launches, span, exposed, blocks, release, work
    reach = order[0]["start"]  # the latest end of any launch so far
    gaps = 0
    listing = []
    for g in order:
        start, end = g["start"], g["end"]
        gaps += max(0, start - reach)
        exposed = max(0, end - max(reach, start))
        wait = g["wait"] if g["wait"] is not None else start
        release = wait - reach
        work = end - wait
        if a.list is not None and g["step"] == a.list:
            listing.append((g["kernel"], start, wait, end, exposed, release, g["blocks"]))
        reach = max(reach, end)
        k = per[g["kernel"]]
        k[0] += 1
        k[1] += end - start
        k[2] += exposed
        k[3] += g["blocks"]
        k[4] += release
        k[5] += work
    wall = reach - order[0]["start"]
    steps = max(1, a.steps)
    print(f"{len(order)} launches over {wall / 1e3:.1f} us: {wall / 1e3 / steps:.1f} us a step over {steps} steps, "
          f"of which {gaps / 1e3 / steps:.1f} us a step no kernel ran")
    print(f"{'kernel':<34}{'a step':>8}{'span us':>10}{'exposed us':>12}{'exposed/step':>14}{'release us':>12}"
          f"{'work us':>10}{'blocks':>8}")
    for kernel, (n, span, exposed, blocks, release, work) in sorted(per.items(), key=lambda kv: -kv[1][2]):
        print(f"{kernel:<34}{n / steps:>8.1f}{span / n / 1e3:>10.2f}{exposed / n / 1e3:>12.2f}"
              f"{exposed / steps / 1e3:>14.1f}{release / n / 1e3:>12.2f}{work / n / 1e3:>10.2f}{blocks / n:>8.0f}")
    if listing:
        t0 = listing[0][1]
        print(f"\nstep {a.list}, launch by launch (us from its first start):")
        print(f"{'kernel':<34}{'start':>9}{'wait':>9}{'end':>9}{'exposed':>9}{'release':>9}{'blocks':>8}")
        for kernel, start, wait, end, exposed, release, blocks in listing:
            print(f"{kernel:<34}{(start - t0) / 1e3:>9.2f}{(wait - t0) / 1e3:>9.2f}{(end - t0) / 1e3:>9.2f}"
                  f"{exposed / 1e3:>9.2f}{release / 1e3:>9.2f}{blocks:>8}")


if __name__ == "__main__":
    main()
