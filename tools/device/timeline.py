#!/usr/bin/env python3
"""timeline.py — where a recorded step's time goes, from the CSV `PLUMB_CUDA_TIMELINE=FILE` writes
(crates/backend-cuda/src/timeline.rs: every block of every launch of the recorded decode steps,
stamped with the GPU's global timer as its thread 0 started and returned).

    python3 tools/device/timeline.py FILE [--steps N]

Launches are ordered by their first block's start. For each kernel it prints the launches, the
mean span (first block's start to last block's end), and the mean exposed time: the part of the
span past the end of every launch before it, which is what the launch adds to the wall time of
the recorded steps (PDL lets a launch start before the one before it ends; that overlap is not
exposed). The exposed times add up to the recorded wall time less the gaps, printed too. --steps
(the recorded decode steps, PLUMB_CUDA_TIMELINE_STEPS' COUNT, default 8) turns totals into per-step
figures.
"""
import argparse
import csv
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    launches = {}
    for row in csv.DictReader(open(a.file)):
        g = launches.setdefault(row["grid"], [row["kernel"], None, 0, 0])
        s, e = int(row["start_ns"]), int(row["end_ns"])
        g[1] = s if g[1] is None else min(g[1], s)
        g[2] = max(g[2], e)
        g[3] += 1
    order = sorted(launches.values(), key=lambda g: g[1])
    if not order:
        print("no launches recorded")
        return
    per = defaultdict(lambda: [0, 0, 0, 0])  # launches, span ns, exposed ns, blocks
    reach = order[0][1]  # the latest end of any launch so far
    gaps = 0
    for kernel, start, end, blocks in order:
        gaps += max(0, start - reach)
        exposed = max(0, end - max(reach, start))
        reach = max(reach, end)
        k = per[kernel]
        k[0] += 1
        k[1] += end - start
        k[2] += exposed
        k[3] += blocks
    wall = reach - order[0][1]
    steps = max(1, a.steps)
    print(f"{len(order)} launches over {wall / 1e3:.1f} us: {wall / 1e3 / steps:.1f} us a step over {steps} steps, "
          f"of which {gaps / 1e3 / steps:.1f} us a step no kernel ran")
    print(f"{'kernel':<34}{'a step':>8}{'span us':>10}{'exposed us':>12}{'exposed/step':>14}{'blocks':>8}")
    for kernel, (n, span, exposed, blocks) in sorted(per.items(), key=lambda kv: -kv[1][2]):
        print(f"{kernel:<34}{n / steps:>8.1f}{span / n / 1e3:>10.2f}{exposed / n / 1e3:>12.2f}"
              f"{exposed / steps / 1e3:>14.1f}{blocks / n:>8.0f}")


if __name__ == "__main__":
    main()
