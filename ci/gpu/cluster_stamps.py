"""Phase times of the nvidia-sm100 cluster kernel (block 0 of row 0, %globaltimer),
for the long-row anchor cells: where the time of one call goes.

    SPARSETOPK_NV_PATH=stamps python ci/gpu/cluster_stamps.py
"""

import os

import torch

import sparsetopk
from sparsetopk_nvidia_sm100._backend import _ext

os.environ["SPARSETOPK_NV_PATH"] = os.environ.get("SPARSETOPK_NV_PATH", "stamps")
C = _ext()
NAMES = ["load/sample", "select#1", "gather", "exchange", "select#2", "output"]  # resident rows: load, select#2, output
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
x = torch.randn(64, 1 << 20, generator=g, device=dev)
for rows, n, order in [(4, 40960, "any"), (4, 153600, "any"), (16, 1 << 20, "any"), (64, 1 << 20, "any"),
                       (4, 40960, "rank"), (4, 153600, "rank"), (16, 1 << 20, "rank"), (64, 1 << 20, "rank")]:
    xs = x[:rows]
    lengths = torch.full((rows,), n, dtype=torch.int32, device=dev)
    plan = C.plan(rows, 1 << 20, 2048, 0)
    if plan["cluster"] == 0:
        # the balanced split takes the row, not this kernel: the stamps would be the previous cell's
        print(f"{rows}x{n} {order}: the split path (ci/gpu/split_stamps.py), not the cluster kernel", flush=True)
        continue
    for _ in range(3):
        sparsetopk.topk(xs, 2048, lengths=lengths, order=order, backend="nvidia-sm100")
    torch.cuda.synchronize()
    t = [int(v) for v in C.cluster_stamps()]
    t0 = t[0]
    marks = [(i, t[i]) for i in range(1, 7) if t[i] >= t0 and t[i] - t0 < 10**7]
    prev, parts = t0, []
    for i, v in marks:
        parts.append(f"{NAMES[i - 1]} {(v - prev) / 1000:.1f}")
        prev = v
    # clock64 marks of the last cluster_find: stores issued, barrier, local sums, find
    cf = [t[17] - t[16], t[18] - t[17], t[19] - t[18], t[20] - t[19]]
    print(f"{rows}x{n} {order} C={plan['cluster']}: total {(prev - t0) / 1000:.1f} us | " + ", ".join(parts)
          + f" | passes {t[31]} | last pass cycles: stores {cf[0]}, barrier {cf[1]}, sums {cf[2]}, find {cf[3]}",
          flush=True)
    if t[24] > t[21] > t[20] and t[24] - t[20] < 10**7:  # cluster_finish ran after the last pass
        print(f"    finish cycles: scan {t[21] - t[20]}, exchange {t[22] - t[21]}, rank {t[23] - t[22]}, "
              f"write {t[24] - t[23]}", flush=True)
    if order == "rank" and plan["cluster"] >= 3 and t[28] > t[27] > t[26] > t[25] and t[28] - t[25] < 10**7:  # the spread rank sort ran
        print(f"    rank spread cycles: collect {t[25] - t[23] if t[25] > t[23] > t[20] else -1}, sort own run "
              f"{t[26] - t[25]}, copy + barrier {t[27] - t[26]}, rank + write {t[28] - t[27]}", flush=True)
