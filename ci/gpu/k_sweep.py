"""Time nvidia-sm100 across k on a few shapes, beside torch.topk in the same run, to find
cliffs between the k values the bench grid holds (16, 32, 64, 2048). Same timer as
`sparsetopk bench` (CUDA-graph replay over rotating buffers past L2, median per call);
full rows, fp32 N(0, 1) (SWEEP_DTYPE); SWEEP_RAGGED=1: per-row lengths uniform in
[n/2, n] as in the bench's decode cells, SWEEP_RAGGED=causal: in [1, n] as in a
causal prefill (torch.topk still reads full rows). SWEEP_DIST=band: each score the
max of 64 N(0, 1) draws (the bench's band rows: many scores near the threshold). Each
cell: us and the plan (kernel, and threads a block where the rows kernel runs).

    python ci/gpu/k_sweep.py
    SWEEP_KS=128,2048 SWEEP_SHAPES=4096x4096 SWEEP_ORDERS=any,rank \
        SWEEP_PATHS="auto;rblock=512" SWEEP_TORCH=0 python ci/gpu/k_sweep.py

SWEEP_PATHS: SPARSETOPK_NV_PATH values (';' between them), each timed in turn in
this process (the plan reads the variable at every call).
"""
import os

import torch

import sparsetopk
from sparsetopk.bench.timing import time_cuda
from sparsetopk_nvidia_sm100._backend import _ext

env = os.environ.get
ks = [int(k) for k in env("SWEEP_KS", "8,16,24,32,48,64,96,128,256,512,1024,2048").split(",")]
shapes = [tuple(int(v) for v in s.split("x"))
          for s in env("SWEEP_SHAPES", "64x1344,64x8192,512x4096,4096x4096,16x131072").split(",")]
dtype = getattr(torch, env("SWEEP_DTYPE", "float32"))
dcode = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}[dtype]
orders = env("SWEEP_ORDERS", "rank").split(",")
paths = env("SWEEP_PATHS", "auto").split(";")
with_torch = env("SWEEP_TORCH", "1") == "1"
ragged = env("SWEEP_RAGGED", "0")
if ragged not in ("0", "1", "causal"):
    raise SystemExit(f"SWEEP_RAGGED={ragged!r}: 0, 1 or causal")
ragged = None if ragged == "0" else ragged
dist = env("SWEEP_DIST", "normal")
if dist not in ("normal", "band"):
    raise SystemExit(f"SWEEP_DIST={dist!r}: normal or band")
L2 = torch.cuda.get_device_properties(0).L2_cache_size
g = torch.Generator(device="cuda").manual_seed(0)


def t(fn, views):
    return time_cuda(fn, views, -(-max(views, 16) // views) * views, target_s=0.1, eager=False)["us"]


def label(pl):
    return (f"C={pl['cluster']}" if pl.get("cluster") else "split" if pl.get("split")
            else f"warp{pl['warp_m']}" if pl.get("warp_wpb") else "sampled" if pl.get("sampled_rows")
            else "tile" if pl.get("tile") else f"rows{pl['block']}")


print(f"| shape ({str(dtype)[6:]}{f', ragged {ragged}' if ragged else ''}{', band' if dist == 'band' else ''}) | order | path | " + " | ".join(f"k={k}" for k in ks) + " |")
print("|---|---|---|" + "---|" * len(ks))
for rows, n in shapes:
    views = max(2, min(64, -(-int(2.5 * L2) // (rows * n * dtype.itemsize))))
    if dist == "band":  # a view at a time: the 64 draws a score are 64x the view's size
        x = torch.cat([torch.randn(rows, n, 64, generator=g, device="cuda").amax(dim=2).to(dtype)
                       for _ in range(views)])
    else:
        x = torch.randn(views * rows, n, generator=g, device="cuda").to(dtype)
    lo = 1 if ragged == "causal" else n // 2
    lens = torch.randint(lo, n + 1, (views, rows), generator=g, device="cuda") if ragged else None
    for order in orders:
        for path in paths:
            os.environ["SPARSETOPK_NV_PATH"] = path
            cells = []
            for k in ks:
                if k > n:
                    cells.append("-")
                    continue
                out = torch.empty(rows, k, dtype=torch.int32, device="cuda")

                def fn(i, k=k, out=out, order=order):
                    v = i % views
                    return sparsetopk.topk(x[v * rows:(v + 1) * rows], k, order=order, backend="nvidia-sm100",
                                           out=out, lengths=None if lens is None else lens[v])

                cells.append(f"{t(fn, views):.1f} {label(_ext().plan(rows, n, k, 0, dcode))}")
            print(f"| {rows}x{n} | {order} | {path} | " + " | ".join(cells) + " |", flush=True)
    os.environ.pop("SPARSETOPK_NV_PATH", None)
    if with_torch:
        theirs = []
        for k in ks:
            if k > n:
                theirs.append("-")
                continue

            def tt(i, k=k):
                v = i % views
                return torch.topk(x[v * rows:(v + 1) * rows], k, dim=1)

            theirs.append(f"{t(tt, views):.1f}")
        print(f"| {rows}x{n} | sorted | torch.topk | " + " | ".join(theirs) + " |", flush=True)
    x = None
    torch.cuda.empty_cache()
