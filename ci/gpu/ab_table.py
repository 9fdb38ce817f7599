"""Side-by-side per-call times from `ci/gpu/ab_paths.sh` results:

    python ci/gpu/ab_table.py DIR        (reads DIR/ab-*.json, one column per path)
"""
import glob
import json
import os
import sys

d = sys.argv[1] if len(sys.argv) > 1 else "."
runs = {}
for f in sorted(glob.glob(os.path.join(d, "ab-*.json"))):
    tag = os.path.basename(f)[3:-5]
    runs[tag] = {c["name"]: c.get("best_us") for c in json.load(open(f))["cells"]}
names = []
for r in runs.values():
    names += [n for n in r if n not in names]
print("| cell | " + " | ".join(runs) + " |")
print("|---|" + "---|" * len(runs))
for n in names:
    print(f"| {n} | " + " | ".join(f"{r[n]:.2f}" if r.get(n) else "-" for r in runs.values()) + " |")
