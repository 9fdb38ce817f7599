"""A/B timing of SPARSETOPK_NV_PATH values on anchor cells, interleaved per cell and
repeated, so that drift hits every path alike. Same timer as `sparsetopk bench`:
CUDA-graph replay over rotating buffers past L2, median per call.

Long rows (default: k = 2048 or AB_K, stride 1M, per-row lengths, order any):
    python ci/gpu/ab_long.py auto no-cluster cluster=4       (fp32 N(0,1))
    AB_CELLS=4x40960,64x1048576 AB_ORDER=rank AB_DTYPE=bfloat16 python ci/gpu/ab_long.py auto
Full-width rows (AB_FULL=1: the decode anchors, k = 16, order rank):
    AB_FULL=1 python ci/gpu/ab_long.py auto block
Bench-grid cells (AB_BENCH=scenario[:label substring[|substring...]], N(0,1) in AB_DTYPE, the bench's own
inputs and views; the bytes-read floor at 4.25 TB/s beside each; float16, which the grid
lacks, runs the geometry of its float32 cells):
    AB_BENCH=prefill python ci/gpu/ab_long.py auto cluster=1
Builds are compared by reinstalling between runs in one device call (H200s lent on
different days differ by a few percent): AB_LABEL names the build in the header.
"""
import dataclasses
import os
import sys

import torch

import sparsetopk
from sparsetopk.bench.timing import time_cuda
from sparsetopk_nvidia_sm100._backend import _ext

M1 = 1 << 20
paths = sys.argv[1:] or ["auto"]
full = os.environ.get("AB_FULL") == "1"
default_cells = "64x1344,512x1344,4096x1344,4096x4096,16384x8192" if full else "4x40960,4x153600,16x1048576,64x1048576"
cells = [tuple(int(v) for v in c.split("x")) for c in os.environ.get("AB_CELLS", default_cells).split(",")]
order = os.environ.get("AB_ORDER", "rank" if full else "any")
K = int(os.environ.get("AB_K", "16" if full else "2048"))
label = os.environ.get("AB_LABEL", "")
dtype = getattr(torch, os.environ.get("AB_DTYPE", "float32"))
dcode = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}[dtype]  # the plan differs by input type
repeats = int(os.environ.get("AB_REPEATS", "2"))
L2 = torch.cuda.get_device_properties(0).L2_cache_size
dev = torch.device("cuda")
g = torch.Generator(device=dev).manual_seed(0)
bench = os.environ.get("AB_BENCH")


def plan_label(pl):
    return (f"C={pl['cluster']}" if pl.get("cluster") else ("split" + (" bal" if pl.get("balanced") else ""))
            if pl.get("split")
            else "warp" if pl.get("warp_wpb") else "sampled" if pl.get("sampled_rows")
            else "tile" if pl.get("tile") else "rows")


def ab_row(name, fn, views, plan_of, extra=""):
    """Times every path; each path's answer on view 0 must equal the first path's (sets for "any")."""
    best = {p: [] for p in paths}
    plan = {}
    ref = None
    bad = []
    for _ in range(repeats):
        for p in paths:
            os.environ["SPARSETOPK_NV_PATH"] = p
            plan[p] = plan_label(plan_of())
            calls = -(-max(views, 16) // views) * views
            best[p].append(time_cuda(fn, views, calls, target_s=0.15, eager=False)["us"])
            got = fn(0)[0].sort(dim=1).values if order == "any" or bench else fn(0)[0].clone()
            if ref is None:
                ref = got
            elif not torch.equal(got, ref) and p not in bad:
                bad.append(p)
    print(f"| {name}{extra} | " + " | ".join(f"{min(best[p]):.2f} ({max(best[p]):.2f}) {plan[p]}" for p in paths)
          + " |" + (f" MISMATCH vs {paths[0]}: {', '.join(bad)}" if bad else ""), flush=True)


if bench:
    from sparsetopk.bench import data, scenarios
    scen, _, sub = bench.partition(":")
    print(f"| {label + ': ' if label else ''}{bench} cell ({str(dtype)[6:]}, floor us at 4.25 TB/s) | "
          + " | ".join(paths) + " |")
    print("|---|" + "---|" * len(paths))
    for cell in scenarios.full_grid():
        # the grid holds fp32 and bf16 cells; other dtypes (fp16) time its fp32 cells' geometry
        if cell.op == "topk" and str(dtype)[6:] not in scenarios.DTYPES and cell.dtype == "float32":
            cell = dataclasses.replace(cell, dtype=str(dtype)[6:])
        if cell.scenario != scen or not any(t in cell.label for t in sub.split("|")) \
                or (cell.dtype, cell.dist) != (str(dtype)[6:], "normal"):
            continue
        views = data.plan_views(cell, L2, 2.5, 2048, 8 << 30, dev)
        inp = data.build_inputs(cell, views, dev)
        out = (torch.empty(cell.rows, cell.k, dtype=torch.int32, device=dev), None)
        vs = inp.views

        def fn(i, vs=vs, cell=cell, out=out):
            v = vs[i % len(vs)]
            return sparsetopk.topk(v["scores"], cell.k, lengths=v["lengths"], starts=v["starts"],
                                   index_scale=cell.index_scale, index_offset=cell.index_offset,
                                   order=cell.order, backend="nvidia-sm100", out=out)

        floor = data.floor_bytes(cell) / 4.25e12 * 1e6
        ab_row(f"{cell.label} k={cell.k} {cell.order}", fn, inp.n_views,
               lambda: _ext().plan(cell.rows, cell.width, cell.k, 0, dcode), f" ({floor:.0f})")
        inp = vs = None
        torch.cuda.empty_cache()
    sys.exit(0)
print(f"| {label + ': ' if label else ''}cell ({order}, k={K}, {str(dtype)[6:]}) | " + " | ".join(paths) + " |")
print("|---|" + "---|" * len(paths))
for rows, n in cells:
    per_view = rows * n * dtype.itemsize  # bytes read per call
    views = max(2, min(64, -(-int(2.5 * L2) // per_view)))
    width = n if full else M1
    x = torch.randn(views * rows, width, generator=g, device=dev).to(dtype)
    lengths = None if full else torch.full((rows,), n, dtype=torch.int32, device=dev)
    out = (torch.empty(rows, K, dtype=torch.int32, device=dev), None)

    def fn(i):
        v = i % views
        return sparsetopk.topk(x[v * rows:(v + 1) * rows], K, lengths=lengths, order=order,
                               backend="nvidia-sm100", out=out)

    ab_row(f"{rows}x{n}", fn, views, lambda: _ext().plan(rows, width, K, 0, dcode))
    x = None  # free the views before the next cell
    torch.cuda.empty_cache()
