import csv, sys
from collections import defaultdict
rows = list(csv.DictReader(open(sys.argv[1])))
by = defaultdict(list)
for r in rows: by[r["grid"]].append(r)
out = []
for g, bl in by.items():
    bl.sort(key=lambda r: int(r["start_ns"]))
    step = 0; prev = None
    for r in bl:
        s = int(r["start_ns"])
        if prev is not None and s - prev > 1_000_000: step += 1
        prev = s
        out.append((step, g, r["kernel"], r["block"], r["start_ns"], r["end_ns"]))
w = csv.writer(open(sys.argv[2], "w"))
w.writerow(["step","grid","kernel","block","start_ns","end_ns"])
w.writerows(out)
