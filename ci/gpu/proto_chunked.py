"""Feasibility timing for a chunked two-stage long-row select, built from the shipped kernels.

Stage 1 views each row of R x 1M as C chunks of G columns (virtual rows) and takes the top m
of every chunk; stage 2 takes the top k of the R x (C m) candidates. Exactness needs every
full chunk's m-th key to sit at or below the row's k-th; this script only times the stages
(beside the shipped path, same timer as `sparsetopk bench`) and checks the sets on N(0,1).

    python ci/gpu/proto_chunked.py            (PROTO_SHAPES=G:m,...  PROTO_ROWS=16,64)
"""
import os

import torch

import sparsetopk
from sparsetopk.bench.timing import time_cuda
from sparsetopk_nvidia_sm100._backend import _ext

M1 = 1 << 20
K = 2048
L2 = torch.cuda.get_device_properties(0).L2_cache_size
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
shapes = [tuple(int(v) for v in s.split(":")) for s in os.environ.get("PROTO_SHAPES", "4096:32,2048:16,8192:64").split(",")]
dtype = getattr(torch, os.environ.get("PROTO_DTYPE", "float32"))
dcode = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}[dtype]


def t(fn, views):
    calls = -(-max(views, 16) // views) * views
    return min(time_cuda(fn, views, calls, target_s=0.15, eager=False)["us"] for _ in range(2))


def label(pl):
    return (f"C={pl['cluster']}" if pl.get("cluster") else ("split" + (" bal" if pl.get("balanced") else ""))
            if pl.get("split") else "warp" if pl.get("warp_wpb") else "sampled" if pl.get("sampled_rows")
            else "tile" if pl.get("tile") else "rows")


for R in [int(r) for r in os.environ.get("PROTO_ROWS", "16,64").split(",")]:
    views = max(2, min(64, -(-int(2.5 * L2) // (R * M1 * dtype.itemsize))))
    x = torch.randn(views * R, M1, generator=g, device=dev).to(dtype)
    lengths = torch.full((R,), M1, dtype=torch.int32, device=dev)
    out = torch.empty(R, K, dtype=torch.int32, device=dev)

    def auto(i):
        v = i % views
        return sparsetopk.topk(x[v * R:(v + 1) * R], K, lengths=lengths, order="any", backend="nvidia-sm100", out=out)

    base = t(auto, views)
    ref = auto(0)[0].sort(dim=1).values
    print(f"R={R} n=1M k={K} {str(dtype)[6:]}: shipped {base:.2f} us ({label(_ext().plan(R, M1, K, 0, dcode))})", flush=True)
    for G, m in shapes:
        C = M1 // G
        o1 = (torch.empty(R * C, m, dtype=torch.int32, device=dev), torch.empty(R * C, m, device=dev))
        o2 = (torch.empty(R, K, dtype=torch.int32, device=dev), torch.empty(R, K, device=dev))
        cand = o1[1].view(R, C * m)

        def s1(i, G=G, m=m, o1=o1):
            v = i % views
            return sparsetopk.topk(x[v * R:(v + 1) * R].view(-1, G), m, order="any", return_values=True,
                                   backend="nvidia-sm100", out=o1)

        def s2(i, cand=cand, o2=o2):
            return sparsetopk.topk(cand, K, order="any", return_values=True, backend="nvidia-sm100", out=o2)

        def both(i, G=G, m=m, s1=s1, s2=s2, o1=o1):
            s1(i)
            pos = s2(i)[0].long()
            return (o1[0].view(R, -1).gather(1, pos) + (pos // m) * G).int(), None

        t1, t2, tb = t(s1, views), t(s2, views), t(both, views)
        got = both(0)[0].sort(dim=1).values
        # the exactness condition on this data: each chunk's m-th value below the row's k-th
        kth = o2[1].min(dim=1).values
        worst = o1[1].view(R, C, m).min(dim=2).values.max(dim=1).values
        ok = bool((worst < kth).all())
        print(f"  G={G} m={m} (C={C}, {C * m} cand/row): stage1 {t1:.2f} ({label(_ext().plan(R * C, G, m, 0, dcode))})"
              f" stage2 {t2:.2f} ({label(_ext().plan(R, C * m, K, 0, dcode))}) both+torch glue {tb:.2f}"
              f" | same set as shipped: {torch.equal(got, ref)} | chunk bound below k-th: {ok}", flush=True)
    x = None
    torch.cuda.empty_cache()
