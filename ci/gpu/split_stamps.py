"""Phase times, in SM clock cycles, of the nvidia-sm100 split's sample and final
kernels (STK_CLOCK slots of _C.cluster_stamps(): the block of one row each).

    python ci/gpu/split_stamps.py                  (SPLIT_PATH=split: the balanced split)
    SPLIT_CELLS=64x1048576,4x40960 STAMP_ROWS=0,17 python ci/gpu/split_stamps.py

Cells are ROWSxLENGTH (stride 1M, k = 2048, order any, fp32 N(0,1)), or "dsa"
(32 ragged rows of 40K to 1M columns). Sample: entry to its estimate (loads,
then each radix pass over the sample keys). Final:
prologue (geometry, the row's mode), counts + scan, copy of the candidates into
shared memory, select, write.
"""

import math
import os

import torch

import sparsetopk
from sparsetopk_nvidia_sm100._backend import _ext

C = _ext()
BASE = os.environ.get("SPLIT_PATH", "split")
K = 2048
M1 = 1 << 20
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
cells = os.environ.get("SPLIT_CELLS", "64x1048576,16x1048576,4x40960,dsa").split(",")
stamp_rows = [int(v) for v in os.environ.get("STAMP_ROWS", "0").split(",")]
names = ["prologue", "counts+scan", "copy", "select", "write"]
for cell in cells:
    if cell == "dsa":
        gc = torch.Generator().manual_seed(1)
        lens = torch.exp(torch.empty(32).uniform_(math.log(40_000), math.log(M1), generator=gc)).long()
    else:
        rows, n = (int(v) for v in cell.split("x"))
        lens = torch.full((rows,), n, dtype=torch.int64)
    x = torch.randn(len(lens), M1, generator=g, device=dev)
    lengths = lens.to(torch.int32).to(dev)
    for b in stamp_rows:
        if b >= len(lens):
            continue
        os.environ["SPARSETOPK_NV_PATH"] = f"{BASE},stamps,stampblock={b}"
        for _ in range(3):
            sparsetopk.topk(x, K, lengths=lengths, order="any", backend="nvidia-sm100")
        torch.cuda.synchronize()
        t = [int(v) for v in C.cluster_stamps()][16:28]
        fin = ", ".join(f"{names[i]} {t[4 + i] - t[3 + i]}" for i in range(5) if t[4 + i] >= t[3 + i] > 0)
        # sample: slot 2 after the loads, 9, 10, 11 after each pass (a pass not run keeps an older stamp)
        sp, prev = [f"loads {t[2] - t[0]}"], t[2]
        for i in (9, 10, 11):
            if prev < t[i] <= t[1]:
                sp.append(f"pass {i - 8} {t[i] - prev}")
                prev = t[i]
        print(f"{cell} row {b} (n={int(lens[b])}, {os.environ['SPARSETOPK_NV_PATH']}): sample {t[1] - t[0]} cycles"
              f" ({', '.join(sp)}) | final {t[8] - t[3]}: {fin}", flush=True)
    x = None
    torch.cuda.empty_cache()
