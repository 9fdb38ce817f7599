"""Benchmark + exactness check of the triton-portable backend on a GPU.

Method (as the nvidia-sm100 issue): fp32 N(0,1) scores, per call, CUDA-graph
replay over rotating input buffers past L2, median over replays, beside
torch.topk in the same run. Every timed cell is also checked bit-exact against
a GPU key-sort oracle (torch.topk on the int64 canonical keys).

    python bench/bench_triton.py [--cells small,large,mid,long] [--sweep] [--json out.json]
    python bench/bench_triton.py --cells mid,large --schemes auto,radix,sample,stream
    python bench/bench_triton.py --cells large,long --config fallback_miss_div=1 --seed 1

--schemes times each cell once per scheme (launch.FORCE_SCHEME; "auto" = scheme_for's
pick), torch.topk once a cell: the data behind scheme_for's thresholds. Sample-scheme
cells also report `fallback_rows`: rows its estimate missed over the cell's buffers
(each pays the radix fallback, so the time depends on the draw). --config: launch.CONFIG
overrides (integers) for every cell. --seed: each cell's draws come from it and the cell's
name, so two configs of one seed see the same scores (and the same misses).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import zlib

import torch

import sparsetopk_triton
from sparsetopk.protocol import TopKCall
from sparsetopk_triton import launch

BE = sparsetopk_triton.make_backend()
L2_BYTES = 50 * 2**20
DEV = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: TRITON_INTERPRET smoke of this script


def make_call(x, k, lengths=None, order="rank", tie="low"):
    return TopKCall(scores=x, k=k, lengths=lengths, starts=None, index_scale=1, index_offset=0,
                    force_begin=0, force_end=0, tie_break=tie, order=order, return_values=False)


def oracle_keys_topk(x, k, lengths, tie="low", order="rank", with_values=False):
    """Exact top-k by int64 canonical key, on the GPU (independent of the kernels)."""
    xf = x.float()
    xf = torch.where(xf == 0, torch.zeros_like(xf), xf)
    xf = torch.where(torch.isnan(xf), torch.full_like(xf, float("-inf")), xf)
    b = xf.view(torch.int32).long()
    s = torch.where(b < 0, b ^ 0x7FFFFFFF, b)
    g = torch.arange(x.shape[1], device=x.device)
    key = (s << 32) | ((0xFFFFFFFF - g) if tie == "low" else g)
    if lengths is not None:
        key = torch.where(g[None, :] < lengths[:, None].long(), key, torch.full_like(key, -(2**63)))
    top = torch.topk(key, k, dim=1).values
    lo = top & 0xFFFFFFFF
    idx = ((0xFFFFFFFF - lo) if tie == "low" else lo).to(torch.int32)
    empty = top == -(2**63)
    idx = torch.where(empty, torch.full_like(idx, -1), idx)
    sv = (top >> 32)
    vb = torch.where(sv < 0, sv ^ 0x7FFFFFFF, sv).to(torch.int32)
    val = torch.where(empty, torch.full_like(xf[:, :1].expand(-1, k), float("-inf")), vb.view(torch.float32))
    if order == "index":
        ik = torch.where(empty, torch.full_like(top, 2**62), idx.long())
        o = torch.argsort(ik, dim=1)
        idx, val = torch.gather(idx, 1, o), torch.gather(val, 1, o)
    return (idx, val) if with_values else idx


def fuzz(total_rows, seed=0):
    """Random rows (narrow score bands, ties, NaN/inf/-0, lengths) vs the GPU oracle."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    bad = 0
    done = {}
    shapes = [(8192, 1344, 16), (4096, 3000, 64), (2048, 8300, 7), (512, 20000, 2048), (1024, 5000, 300)]
    if DEV == "cpu":
        shapes = [(3, 300, 16), (2, 1100, 7), (2, 500, 200)]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        n = 0
        it = 0
        while n < total_rows:
            rows, width, k = shapes[it % len(shapes)]
            it += 1
            mode = it % 4
            if mode == 0:  # narrow band: thousands of values within a few ulps
                x = 1.0 + torch.randint(-40, 40, (rows, width), device=DEV, generator=gen).float() * 2**-20
            elif mode == 1:  # coarse grid: many exact ties
                x = torch.randint(-3, 4, (rows, width), device=DEV, generator=gen).float()
            elif mode == 2:
                x = torch.randn(rows, width, device=DEV, generator=gen)
            else:
                x = torch.randn(rows, width, device=DEV, generator=gen)
                r = torch.rand(rows, width, device=DEV, generator=gen)
                x[r < 0.02] = float("nan")
                x[(r > 0.02) & (r < 0.04)] = float("inf")
                x[(r > 0.04) & (r < 0.06)] = -0.0
                x[(r > 0.06) & (r < 0.08)] = 0.0
            x = x.to(dtype)
            lens = torch.randint(-5, width + 50, (rows,), device=DEV, generator=gen).to(torch.int32)
            tie = ("low", "high")[it % 2]
            order = ("rank", "index")[(it // 2) % 2]
            call = TopKCall(scores=x, k=k, lengths=lens, starts=None, index_scale=1, index_offset=0,
                            force_begin=0, force_end=0, tie_break=tie, order=order, return_values=True)
            oi = torch.empty(rows, k, dtype=torch.int32, device=DEV)
            ov = torch.empty(rows, k, device=DEV)
            BE.topk(call, oi, ov)
            ri, rv = oracle_keys_topk(x, k, lens, tie, order, with_values=True)
            mism = int(((oi != ri).any(1) | (ov.view(torch.int32) != rv.view(torch.int32)).any(1)).sum())
            bad += mism
            n += rows
        done[str(dtype)] = n
        print(f"fuzz {dtype}: {n} rows, mismatching rows so far {bad}", flush=True)
    print(f"FUZZ: {sum(done.values())} rows, {bad} mismatching rows", flush=True)
    return bad


def time_graph(fn_list, reps=15):
    """fn_list: callables over rotating buffers. Returns median us per call."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fn_list:  # warm-up / compile outside capture
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for f in fn_list:
            f()
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / len(fn_list))
    return statistics.median(times)


WARM_ONLY = False
SEED = 0  # --seed


def cell(name, rows, width, k, order, length=None, stride=None, check=True, with_torch=True):
    dev = DEV
    torch.manual_seed(SEED * 1_000_003 + zlib.crc32(f"{name} {order}".encode()))
    stride = stride or width
    if WARM_ONLY:  # compile the variants this cell uses, no timing
        x = torch.randn(rows, stride, device=dev)[:, :width]
        lens = None if length is None else torch.full((rows,), length, dtype=torch.int32, device=dev)
        out = torch.empty(rows, k, dtype=torch.int32, device=dev)
        BE.topk(make_call(x, k, lens, order), out, None)
        torch.cuda.synchronize()
        print("warmed", name, order, flush=True)
        return dict(cell=name, exact=None)
    touched = rows * (length if length is not None else width) * 4
    nbuf = max(2, min(256, (3 * L2_BYTES) // max(touched, 1) + 1))
    bufs = [torch.randn(rows, stride, device=dev) for _ in range(nbuf)]
    xs = [b[:, :width] for b in bufs]
    lens = None
    if length is not None:
        lens = torch.full((rows,), length, dtype=torch.int32, device=dev)
    outs = [torch.empty(rows, k, dtype=torch.int32, device=dev) for _ in range(nbuf)]
    calls = [make_call(x, k, lens, order) for x in xs]

    def ours(i):
        return lambda: BE.topk(calls[i], outs[i], None)

    ok = None
    if check:
        ours(0)()
        ref = oracle_keys_topk(xs[0], k, lens)
        got = outs[0]
        if order == "rank":
            ok = bool(torch.equal(got, ref))
        else:
            ok = bool(torch.equal(torch.sort(got, dim=1).values, torch.sort(ref, dim=1).values))
    t_ours = time_graph([ours(i) for i in range(nbuf)])
    scheme = launch.scheme_for(calls[0])
    fallback_rows = None
    if scheme == "sample":  # rows the sample flagged for its radix fallback
        keep, launch.KEEP_LANE_FLAGS = launch.KEEP_LANE_FLAGS, True
        fallback_rows = 0
        for i in range(nbuf):
            ours(i)()
            fallback_rows += int(launch.LAST_SAMPLE_FLAGS.sum())
        launch.KEEP_LANE_FLAGS = keep
    tw = length if length is not None else width
    tviews = [b[:, :tw] for b in bufs]
    t_torch = time_graph([(lambda v=v: torch.topk(v, k, dim=1)) for v in tviews]) if with_torch else float("nan")
    rec = dict(cell=name, rows=rows, width=width, k=k, order=order, length=length, stride=stride,
               scheme=scheme, us=round(t_ours, 2), torch_us=round(t_torch, 2),
               speedup=round(t_torch / t_ours, 2), exact=ok, nbuf=nbuf, fallback_rows=fallback_rows)
    print(json.dumps(rec), flush=True)
    bufs = xs = outs = None  # free the buffers (the closures above are done)
    torch.cuda.empty_cache()
    return rec


SMALL = [("64x1344 k16", 64, 1344, 16), ("512x1344 k16", 512, 1344, 16),
         ("4096x4096 k16", 4096, 4096, 16), ("16384x8192 k16", 16384, 8192, 16)]
LARGE = [(r, L) for L in (40_000, 150_000, 1_000_000) for r in (4, 16, 64)]
# decode rows at k above the stream scheme's 128: where scheme_for picks sample or radix
MID = [(f"{r}x{n} k{k}", r, n, k) for r, n in ((512, 1344), (4096, 4096), (512, 16384))
       for k in (129, 160, 224, 512)]

# full 1M rows at k below 2048: the sample's 4096 draws put few samples above the
# threshold there, so its fallback rate (and the cost of a fallback row) shows
LONG = [(f"{r}x1M k{k}", r, 1 << 20, k) for r in (16, 64) for k in (129, 512)]


def cells(schemes, cfg, *args, **kw):
    """One cell per scheme (torch.topk timed with the first only); FORCE_SCHEME restored."""
    out = []
    for i, sch in enumerate(schemes):
        launch.FORCE_SCHEME = "" if sch == "auto" else sch
        try:
            r = cell(*args, with_torch=i == 0, **kw)
        finally:
            launch.FORCE_SCHEME = FORCED
        r["config"] = cfg
        r["forced"] = sch
        out.append(r)
    return out


FORCED = launch.FORCE_SCHEME


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--cells", default="small,large")
    ap.add_argument("--orders", default="any")
    ap.add_argument("--sweep", action="store_true", help="also try a few launch configs")
    ap.add_argument("--json", default=None)
    ap.add_argument("--warm", action="store_true", help="only compile the kernels the cells use")
    ap.add_argument("--fuzz", type=int, default=0, help="fuzz this many rows per dtype, then exit")
    ap.add_argument("--config", default="",
                    help="launch.CONFIG overrides for every cell, e.g. fallback_miss_div=1")
    ap.add_argument("--seed", type=int, default=0, help="draws: this and each cell's name")
    ap.add_argument("--schemes", default="auto",
                    help="comma list of auto/lane/stream/radix/sample: time every cell under each")
    a = ap.parse_args(argv)
    schemes = a.schemes.split(",")
    if a.fuzz:
        return 1 if fuzz(a.fuzz) else 0
    global WARM_ONLY, SEED
    WARM_ONLY, SEED = a.warm, a.seed
    if DEV == "cuda":
        print("device:", torch.cuda.get_device_name(), "triton", __import__("triton").__version__,
              "torch", torch.__version__, flush=True)
    print("props:", launch.device_props(torch.empty(1, device=DEV)), flush=True)
    recs = []
    configs = [{}]
    for kv in filter(None, a.config.split(",")):
        key, val = kv.split("=")
        configs[0][key] = int(val)
    if a.sweep:  # small cells: bigger stream tile; large cells: more programs per SM
        configs += [{"stream_tile": 8192}, {"radix_programs_per_sm": 8}]
    base = dict(launch.CONFIG)
    for cfg in configs:
        launch.CONFIG.clear()
        launch.CONFIG.update(base, **cfg)
        print("config:", cfg, flush=True)
        t0 = time.time()
        if "small" in a.cells:
            for name, rows, width, k in SMALL:
                if cfg and set(cfg) <= {"radix_tile", "radix_programs_per_sm"}:
                    continue
                recs += cells(schemes, cfg, name, rows, width, k, "rank")
        if "mid" in a.cells:
            for name, rows, width, k in MID:
                recs += cells(schemes, cfg, name, rows, width, k, "rank")
        if "long" in a.cells:
            for name, rows, width, k in LONG:
                recs += cells(schemes, cfg, name, rows, width, k, "any")
        if "large" in a.cells:
            for rows, L in LARGE:
                if cfg and set(cfg) <= {"stream_tile"}:
                    continue
                for order in a.orders.split(","):
                    recs += cells(schemes, cfg, f"{rows}x{L} k2048 {order}", rows, 1_000_000, 2048, order,
                                  length=L, stride=1_000_000)
        print(f"config {cfg} done in {time.time() - t0:.1f}s", flush=True)
    launch.CONFIG.clear()
    launch.CONFIG.update(base)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)
    bad = [r for r in recs if r["exact"] is False]
    print("EXACT:", "all" if not bad else f"{len(bad)} mismatching cells", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
