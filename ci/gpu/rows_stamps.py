"""Phase times, in SM clock cycles, of the nvidia-sm100 one-block kernel on
short decode rows (block 0 = row 0; STK_CLOCK slots of _C.cluster_stamps()):
where one call's time goes inside the kernel.

    python ci/gpu/rows_stamps.py          (sets SPARSETOPK_NV_PATH=block,stamps)
"""

import os

os.environ["SPARSETOPK_NV_PATH"] = os.environ.get("SPARSETOPK_NV_PATH", "block,stamps")

import torch  # noqa: E402

import sparsetopk  # noqa: E402
from sparsetopk_nvidia_sm100._backend import _ext  # noqa: E402

C = _ext()
NAMES = ["prologue", "load", "bound", "append", "-", "rank + write"]
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
for rows, width, k in [(64, 672, 16), (64, 1344, 16), (64, 2048, 16), (64, 4096, 16), (512, 1344, 16), (64, 1344, 64)]:
    x = torch.randn(rows, width, generator=g, device=dev)
    plan = C.plan(rows, width, k, 0)
    for _ in range(3):
        sparsetopk.topk(x, k, backend="nvidia-sm100")
    torch.cuda.synchronize()
    t = [int(v) for v in C.cluster_stamps()]
    c = t[16:24]
    if c[6] > c[0] and c[6] - c[0] < 10**7:
        parts = ", ".join(f"{NAMES[i]} {c[i + 1] - c[i]}" for i in range(6))
        total = c[6] - c[0]
    else:
        parts = f"radix fallback {c[7] - c[0]}"
        total = c[7] - c[0]
    print(f"{rows}x{width} k={k} block={plan['block']}: {total} cycles | {parts} | survivors {t[30]}",
          flush=True)
