"""Graph-replay timing of the installed nvidia-sm100 build on full-width k=16 shapes
(the anchor/decode cells of the warp and one-block kernels), one line per cell,
tagged with a label, so that builds can be compared by reinstalling between runs:

    python ci/gpu/ab_shapes.py HEAD                       (fp32 N(0,1), order rank)
    AB_CELLS=4096x4096,512x1344 AB_K=16 AB_REPEATS=3 python ci/gpu/ab_shapes.py patched

Same timer as `sparsetopk bench`: CUDA-graph replay over rotating buffers past L2,
median per call; the best of AB_REPEATS medians is printed, the worst in brackets.
"""
import os
import sys

import torch

import sparsetopk
from sparsetopk.bench.timing import time_cuda

label = sys.argv[1] if len(sys.argv) > 1 else "build"
cells = [tuple(int(v) for v in c.split("x")) for c in
         os.environ.get("AB_CELLS", "64x1344,512x1344,4096x1344,4096x4096,16384x8192").split(",")]
order = os.environ.get("AB_ORDER", "rank")
K = int(os.environ.get("AB_K", "16"))
dtype = getattr(torch, os.environ.get("AB_DTYPE", "float32"))
repeats = int(os.environ.get("AB_REPEATS", "2"))
L2 = torch.cuda.get_device_properties(0).L2_cache_size
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
res = []
for rows, n in cells:
    per_view = rows * n * dtype.itemsize
    views = max(2, min(64, -(-int(2.5 * L2) // per_view)))
    x = torch.randn(views * rows, n, generator=g, device=dev).to(dtype)
    out = (torch.empty(rows, K, dtype=torch.int32, device=dev), None)

    def fn(i):
        v = i % views
        return sparsetopk.topk(x[v * rows:(v + 1) * rows], K, order=order, backend="nvidia-sm100", out=out)

    calls = -(-max(views, 16) // views) * views
    ts = [time_cuda(fn, views, calls, target_s=0.15, eager=False)["us"] for _ in range(repeats)]
    res.append(f"{rows}x{n} {min(ts):.2f} ({max(ts):.2f})")
    x = None  # free the views before the next cell
    torch.cuda.empty_cache()
print(f"{label} ({order}, k={K}, {str(dtype)[6:]}): " + " | ".join(res), flush=True)
