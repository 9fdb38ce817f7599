"""Per-kernel durations of the sampled split (sample, gather, final) under
each SPARSETOPK_NV_PATH value, from the torch profiler's CUDA activity:

    python ci/gpu/split_kernel_times.py "auto" "no-chist"

Every path runs with `no-pdl` added, so a kernel's duration is its own work
(with programmatic dependent launch a kernel starts while the previous one
runs and its duration includes that wait). Cells: 16 x 1M, 64 x 1M and a
32-row DSA-decode-like call (ragged 40K-1M), fp32 N(0,1), k = 2048, any.
SPLIT_ITERS calls each (default 20); prints the mean us per kernel.
SPLIT_CELLS=prefill: the sampled-rows kernel (and sampled_est_kernel under
`estk`) on 4096 causal rows of a 128K sequence instead.
"""
import math
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import sparsetopk

ITERS = int(os.environ.get("SPLIT_ITERS", "20"))
g = torch.Generator(device="cuda").manual_seed(1)
W = 1 << 20
if os.environ.get("SPLIT_CELLS") == "prefill":
    S = 128 * 1024
    cells = {"causal": (torch.randn(4096, S, generator=g, device="cuda"),
                        torch.arange(S - 4095, S + 1, dtype=torch.int32, device="cuda"))}
else:
    cells = {
        "16x1M": (torch.randn(16, W, generator=g, device="cuda"), None),
        "64x1M": (torch.randn(64, W, generator=g, device="cuda"), None),
    }
    gc = torch.Generator().manual_seed(2)
    dsa = torch.exp(torch.empty(32).uniform_(math.log(40000), math.log(W), generator=gc)).long()
    cells["dsa32"] = (torch.randn(32, W, generator=g, device="cuda"), dsa.to(torch.int32).cuda())
for path in sys.argv[1:] or ["auto"]:
    os.environ["SPARSETOPK_NV_PATH"] = (path + ",no-pdl") if path != "auto" else "no-pdl"
    for name, (x, lens) in cells.items():
        out = (torch.empty(x.shape[0], 2048, dtype=torch.int32, device="cuda"),
               torch.empty(x.shape[0], 2048, device="cuda"))
        for _ in range(3):
            sparsetopk.topk(x, 2048, lengths=lens, order="any", out=out, backend="nvidia-sm100")
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(ITERS):
                sparsetopk.topk(x, 2048, lengths=lens, order="any", out=out, backend="nvidia-sm100")
            torch.cuda.synchronize()
        parts = []
        for e in prof.key_averages():
            if ("split_" in e.key or "sampled_" in e.key) and e.count:
                short = e.key.split("stk_nv::")[-1].split("_kernel")[0]
                dev_us = getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0.0)) / e.count
                parts.append(f"{short} {dev_us:.2f}")
        print(f"{path:>12} {name:>6}: " + ", ".join(sorted(parts)), flush=True)
