#!/usr/bin/env python3
"""by-grid.py — the per-launch exposure table of receipts/ab/session26/README.md from a timeline
CSV (PLUMB_CUDA_TIMELINE, xz or plain): over every recorded step, each launch's end past the
latest end of the launches before it (launches in order of their first block's start), the
`linear_tma` launches told apart by their grids.

    python3 receipts/ab/session26/by-grid.py FILE.csv[.xz] ...
"""
import collections, csv, io, lzma, sys

for name in sys.argv[1:]:
    text = lzma.open(name, "rt") if name.endswith(".xz") else open(name)
    rows = list(csv.DictReader(text))
    steps = sorted({int(r["step"]) for r in rows})
    tot, cnt = collections.defaultdict(float), collections.defaultdict(int)
    by_step = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        by_step[int(r["step"])][int(r["grid"])].append(r)
    for st in steps:
        launches = by_step[st]
        order = sorted(launches, key=lambda g: min(int(r["start_ns"]) for r in launches[g]))
        latest = None
        for g in order:
            blocks = launches[g]
            end = max(int(r["end_ns"]) for r in blocks)
            kernel = blocks[0]["kernel"]
            label = f"{kernel} [{len(blocks)}]" if kernel.startswith("linear_tma") else kernel
            if latest is not None and end > latest:
                tot[label] += (end - latest) / 1000
            latest = end if latest is None else max(latest, end)
            cnt[label] += 1
    print(name)
    for k in sorted(tot, key=lambda k: -tot[k]):
        print(f"  {k:45s} a step {cnt[k] / len(steps):5.1f}  exposed a step {tot[k] / len(steps):8.1f}  a launch {tot[k] / cnt[k]:6.2f}")
