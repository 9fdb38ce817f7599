"""Kernel-only durations of nvidia-sm100 on a few anchor shapes, for `ncu`:

    ncu --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed \
        python ci/gpu/profile_kernels.py

Each shape runs 3 times (ncu reports every launch); compare with the graph
replay times of `sparsetopk bench` to see the per-call overhead around them.
Arguments ROWSxWIDTH pick shapes (e.g. `4096x4096`); none: all. PROF_ORDER
sets the order of every shape (default: rank for k <= 64, else any), PROF_DTYPE
the score dtype (default float32), PROF_K the k of every shape (default: the
shape's own).
"""
import os
import sys

import torch

import sparsetopk

SHAPES = [  # rows, width, k, lengths per row (None = full)
    (64, 1344, 16, None),
    (512, 1344, 16, None),
    (4096, 4096, 16, None),
    (16384, 8192, 16, None),
    (4, 1 << 20, 2048, 40_000),
    (16, 1 << 20, 2048, 1 << 20),
    (64, 1 << 20, 2048, 1 << 20),
]

pick = set(sys.argv[1:])
for rows, width, k, n in SHAPES:
    k = int(os.environ.get("PROF_K", k))
    if pick and f"{rows}x{width}" not in pick:
        continue
    x = torch.randn(rows, width, device="cuda").to(getattr(torch, os.environ.get("PROF_DTYPE", "float32")))
    kw = {"order": os.environ.get("PROF_ORDER") or ("rank" if k <= 64 else "any")}
    if n is not None:
        kw["lengths"] = torch.full((rows,), n, dtype=torch.int32, device="cuda")
    for _ in range(3):
        sparsetopk.topk(x, k, backend="nvidia-sm100", **kw)
    torch.cuda.synchronize()
    print(f"shape {rows}x{width} k={k} done", flush=True)
