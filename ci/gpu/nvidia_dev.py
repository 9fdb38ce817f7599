"""nvidia-sm100 development check on a GPU: exactness against the core's
``reference`` backend over adversarial data, determinism, graph capture, a
non-default stream, merge, and timing of the issue's benchmark cells
(CUDA-graph replay over rotating buffers past L2, median) beside torch.topk.

    python ci/gpu/nvidia_dev.py [--quick] [--no-bench] [--out DIR]
    python ci/gpu/nvidia_dev.py --selftest-cpu     # harness check: reference vs reference on CPU

Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time

import torch

import sparsetopk

BK = "nvidia-sm100"
REF = "reference"
DTYPES = (torch.float32, torch.bfloat16, torch.float16)

fails = []
counts = {"cases": 0, "fail": 0}


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------- data
def gen(kind: str, rows: int, width: int, dtype, dev, g: torch.Generator):
    if kind == "normal":
        x = torch.randn(rows, width, generator=g, device="cpu")
    elif kind == "ties":
        x = torch.randint(0, 4, (rows, width), generator=g, device="cpu").float()
    elif kind == "const":
        x = torch.full((rows, width), 0.5)
    elif kind == "zeros":
        x = torch.tensor([-0.0, 0.0, 1.0, -1.0])[torch.randint(0, 4, (rows, width), generator=g)]
    elif kind == "special":
        x = torch.randn(rows, width, generator=g)
        sel = torch.randint(0, 8, (rows, width), generator=g)
        x = torch.where(sel == 0, torch.full_like(x, math.nan), x)
        x = torch.where(sel == 1, torch.full_like(x, math.inf), x)
        x = torch.where(sel == 2, torch.full_like(x, -math.inf), x)
        x = torch.where(sel == 3, torch.full_like(x, -0.0), x)
        x = torch.where(sel == 4, torch.full_like(x, 0.0), x)
    elif kind == "band":
        # thousands of values within a few ulps (of the target dtype) of 1.0
        if dtype == torch.float32:
            b = torch.randint(0, 6, (rows, width), generator=g, dtype=torch.int32) + 0x3F800000
            return b.view(torch.float32).to(dev)
        b = torch.randint(0, 4, (rows, width), generator=g, dtype=torch.int16)
        base = 0x3F80 if dtype == torch.bfloat16 else 0x3C00
        return (b + base).view(dtype).to(dev)
    elif kind == "bandneg":
        if dtype == torch.float32:
            b = torch.randint(0, 6, (rows, width), generator=g, dtype=torch.int32) + int(0xBF800000 - 2**32)
            return b.view(torch.float32).to(dev)
        b = torch.randint(0, 4, (rows, width), generator=g, dtype=torch.int16)
        base = 0xBF80 - 65536 if dtype == torch.bfloat16 else 0xBC00 - 65536
        return (b + base).view(dtype).to(dev)
    elif kind == "blocky":
        # a contiguous run of large values (one chunk gets all candidates)
        x = torch.randn(rows, width, generator=g)
        if width > 8:
            a = width // 3
            n = min(width - a, 5000)
            x[:, a : a + n] = 100.0 + torch.randn(rows, n, generator=g) * 1e-3
    elif kind == "exactk":
        x = torch.randn(rows, width, generator=g)
        x[:, ::7] = 1000.0
    else:
        raise ValueError(kind)
    return x.to(dtype).to(dev)


def dirty_view(x: torch.Tensor, extra: int, misalign: int, g):
    """x as a row view of a wider buffer whose extra columns hold garbage."""
    rows, width = x.shape
    buf = torch.empty(rows, misalign + width + extra, dtype=x.dtype, device=x.device)
    junk = torch.tensor([math.nan, math.inf, 1e30, -math.inf, 3e4, -0.0], dtype=torch.float32)
    idx = torch.randint(0, len(junk), buf.shape, generator=g)
    buf.copy_(junk[idx].to(x.dtype))
    buf[:, misalign : misalign + width] = x
    return buf[:, misalign : misalign + width]


# ---------------------------------------------------------------- compare
def run(backend, x, k, **kw):
    r = sparsetopk.topk(x, k, backend=backend, return_values=True, **kw)
    return r.indices, r.values


def same(a_i, a_v, b_i, b_v, order):
    if order == "any":
        # same set, valid first; compare sorted by index
        def canon(i, v):
            key = torch.where(i < 0, torch.full_like(i, 2**31 - 1), i)
            s, p = torch.sort(key, dim=1)
            return torch.gather(i, 1, p), torch.gather(v, 1, p)

        a_i, a_v = canon(a_i, a_v)
        b_i, b_v = canon(b_i, b_v)
    ok_i = torch.equal(a_i, b_i)
    ok_v = torch.equal(a_v.view(torch.int32), b_v.view(torch.int32))
    return ok_i and ok_v


def check(name, x, k, **kw):
    counts["cases"] += 1
    try:
        bi, bv = run(BK, x, k, **kw)
        ri, rv = run(REF, x, k, **kw)
        good = same(bi, bv, ri, rv, kw.get("order", "rank"))
        if good:
            bi2, bv2 = run(BK, x, k, **kw)
            good = torch.equal(bi, bi2) and torch.equal(bv.view(torch.int32), bv2.view(torch.int32))
            if not good:
                name += " [nondeterministic]"
        if not good and kw.get("order") == "any":
            # layout rule: valid slots first
            pass
    except Exception as e:  # noqa: BLE001
        good = False
        name += f" [exception {type(e).__name__}: {e}]"
        bi = ri = None
    if not good:
        counts["fail"] += 1
        if len(fails) < 40:
            msg = f"FAIL {name} k={k} shape={tuple(x.shape)} dtype={x.dtype} kw={ {a: (b if not isinstance(b, torch.Tensor) else 'T') for a, b in kw.items()} }"
            if bi is not None and ri is not None:
                d = (bi != ri).any(dim=1).nonzero().flatten()[:3].tolist()
                msg += f" bad rows {d}"
                for r in d[:1]:
                    msg += f"\n   got {bi[r][:12].tolist()}\n   ref {ri[r][:12].tolist()}"
            fails.append(msg)
            log(msg)
    return good


def correctness(dev, quick: bool):
    g = torch.Generator().manual_seed(1234)
    rnd = random.Random(99)
    t0 = time.time()
    # 1. core sweep: kinds x dtypes x k x widths, default options
    widths = [1, 7, 33, 100, 1344, 4096, 5003, 20000, 40000, 150000]
    ks = [1, 16, 64, 300, 2048, 4096]
    kinds = ["normal", "ties", "const", "zeros", "special", "band", "bandneg", "blocky", "exactk"]
    for dt in DTYPES:
        for w in widths:
            rows = 3 if w >= 100000 else (5 if w >= 20000 else 9)
            for kind in kinds:
                if quick and kind in ("zeros", "bandneg") and w > 5000:
                    continue
                x = gen(kind, rows, w, dt, dev, g)
                for k in ks:
                    if k > 4 * w and k not in (1, 16):
                        continue
                    order = rnd.choice(["rank", "index", "any"])
                    tie = rnd.choice(["low", "high"])
                    check(f"sweep {kind} w={w}", x, k, order=order, tie_break=tie)
    log(f"sweep done {counts} {time.time()-t0:.1f}s")
    # 2. options: lengths (int32/int64/int, negative, oversized), starts, shard view, forcing, dirty tails
    for it in range(120 if not quick else 50):
        dt = rnd.choice(DTYPES)
        w = rnd.choice([1, 5, 64, 700, 1344, 3000, 9000, 33000, 70000])
        rows = rnd.choice([1, 2, 7, 16]) if w > 10000 else rnd.choice([1, 3, 17, 64])
        kind = rnd.choice(kinds)
        x = gen(kind, rows, w, dt, dev, g)
        x = dirty_view(x, rnd.choice([0, 1, 9, 100]), rnd.choice([0, 1, 3]), g)
        scale = rnd.choice([1, 1, 2, 3, 8])
        offset = rnd.randrange(scale)
        kw = dict(index_scale=scale, index_offset=offset, order=rnd.choice(["rank", "index", "any"]),
                  tie_break=rnd.choice(["low", "high"]))
        lt = rnd.choice(["none", "int", "i32", "i64"])
        if lt == "int":
            kw["lengths"] = rnd.randrange(0, w * scale + 1)
        elif lt != "none":
            vals = [rnd.choice([-5, 0, 1, rnd.randrange(w * scale + 1), w * scale, w * scale + 77, 10**9])
                    for _ in range(rows)]
            kw["lengths"] = torch.tensor(vals, dtype=torch.int32 if lt == "i32" else torch.int64, device=dev)
        if rnd.random() < 0.4:
            sv = [rnd.choice([-3, 0, 1, rnd.randrange(w + 1), w, w + 5]) for _ in range(rows)]
            kw["starts"] = torch.tensor(sv, dtype=rnd.choice([torch.int32, torch.int64]), device=dev)
        if rnd.random() < 0.4:
            kw["force_begin"] = rnd.choice([0, 1, 4, 100])
            kw["force_end"] = rnd.choice([0, 1, 16, 3000])
        k = rnd.choice([1, 2, 16, 64, 300, 2048, 4096])
        check(f"opts {kind} w={w}", x, k, **kw)
    log(f"options done {counts} {time.time()-t0:.1f}s")
    # 3. long rows: split path, with per-row lengths in a 1M-stride buffer
    for dt in DTYPES:
        for kind in ["normal", "band", "blocky", "ties", "exactk"]:
            rows = 4
            x = gen(kind, rows, 1 << 20, dt, dev, g)
            lens = torch.tensor([40000, 150000, 1 << 20, 1000], dtype=torch.int32, device=dev)
            for k in [16, 2048, 4096]:
                check(f"long {kind}", x, k, lengths=lens, order=rnd.choice(["rank", "index", "any"]),
                      tie_break=rnd.choice(["low", "high"]))
        if quick:
            break
    x = gen("normal", 64, 1 << 20, torch.float32, dev, g)
    check("long 64x1M", x, 2048, order="any")
    check("long 64x1M rank", x, 2048, order="rank", tie_break="high")
    log(f"long rows done {counts} {time.time()-t0:.1f}s")
    # 4. merge: composition law and random duplicates
    for R in (1, 2, 3, 4, 8):
        for k in (16, 300, 2048):
            if R * k > 16384:
                continue
            x = gen(rnd.choice(["normal", "ties", "band"]), 5, 9000, torch.float32, dev, g)
            tie = rnd.choice(["low", "high"])
            order = rnd.choice(["rank", "index", "any"])
            parts = [sparsetopk.topk(x[:, s::R].contiguous(), k, index_scale=R, index_offset=s, tie_break=tie,
                                     return_values=True, backend=REF) for s in range(R)]
            ii = torch.stack([p.indices for p in parts], 1)
            vv = torch.stack([p.values for p in parts], 1)
            counts["cases"] += 1
            a = sparsetopk.merge(ii, vv, k, tie_break=tie, order=order, backend=BK)
            b = sparsetopk.merge(ii, vv, k, tie_break=tie, order=order, backend=REF)
            c = sparsetopk.topk(x, k, tie_break=tie, order=order, return_values=True, backend=REF)
            ok = same(a.indices, a.values, b.indices, b.values, order) and same(
                a.indices, a.values, c.indices, c.values, order)
            # duplicates across lists
            ii2 = torch.cat([ii, ii[:, :1]], 1)
            vv2 = torch.cat([vv, vv[:, :1]], 1)
            a2 = sparsetopk.merge(ii2, vv2, k, tie_break=tie, order=order, backend=BK)
            b2 = sparsetopk.merge(ii2, vv2, k, tie_break=tie, order=order, backend=REF)
            ok = ok and same(a2.indices, a2.values, b2.indices, b2.values, order)
            if not ok:
                counts["fail"] += 1
                fails.append(f"FAIL merge R={R} k={k} tie={tie} order={order}")
                log(fails[-1])
    log(f"merge done {counts} {time.time()-t0:.1f}s")


def graph_and_stream(dev):
    g = torch.Generator().manual_seed(5)
    for shape, k in (((64, 1344), 16), ((4, 1 << 20), 2048), ((300, 5000), 300)):
        x = gen("normal", shape[0], shape[1], torch.float32, dev, g)
        lens = torch.full((shape[0],), shape[1] - 3, dtype=torch.int64, device=dev)
        ref = sparsetopk.topk(x, k, lengths=lens, backend=REF, return_values=True)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            r = sparsetopk.topk(x, k, lengths=lens, backend=BK, return_values=True)
        torch.cuda.current_stream().wait_stream(s)
        ok = torch.equal(r.indices, ref.indices)
        # graph capture and replay with changed inputs
        out_i = torch.empty(shape[0], k, dtype=torch.int32, device=dev)
        out_v = torch.empty(shape[0], k, dtype=torch.float32, device=dev)
        sparsetopk.topk(x, k, lengths=lens, backend=BK, out=(out_i, out_v))  # warm
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            sparsetopk.topk(x, k, lengths=lens, backend=BK, out=(out_i, out_v))
        x.copy_(gen("ties", shape[0], shape[1], torch.float32, dev, g))
        lens.fill_(shape[1] // 2)
        graph.replay()
        torch.cuda.synchronize()
        ref2 = sparsetopk.topk(x, k, lengths=lens, backend=REF, return_values=True)
        ok = ok and torch.equal(out_i, ref2.indices) and torch.equal(out_v, ref2.values)
        counts["cases"] += 1
        if not ok:
            counts["fail"] += 1
            fails.append(f"FAIL graph/stream {shape} k={k}")
            log(fails[-1])
    log(f"graph/stream done {counts}")


# ---------------------------------------------------------------- timing
def bench_cell(dev, rows, width, k, order, dtype=torch.float32, lengths=None, ragged=False):
    elem = torch.tensor([], dtype=dtype).element_size()
    per = rows * width * elem
    nbuf = max(2, min(64, int(math.ceil(160e6 / max(per, 1)))))
    if lengths is not None and not ragged:
        per_valid = rows * lengths * elem
        nbuf = max(2, min(64, int(math.ceil(160e6 / per_valid))))
    # rotating buffers: for stride-1M rows only the valid prefix is ever touched
    bufs = [torch.randn(rows, width, device=dev).to(dtype) for _ in range(nbuf)]
    if lengths is None:
        lens = None
    elif ragged:
        gg = torch.Generator(device="cpu").manual_seed(3)
        lens = torch.randint(1, lengths + 1, (rows,), generator=gg).to(torch.int32).to(dev)
    else:
        lens = torch.full((rows,), lengths, dtype=torch.int32, device=dev)
    res = {}
    for name in ("nvidia-sm100", "torch.topk"):
        if name == "torch.topk":
            if lens is not None and not ragged:
                views = [b[:, :lengths] for b in bufs]
            else:
                views = bufs
            fn = lambda b: torch.topk(b, k, dim=1, sorted=(order == "rank"))  # noqa: E731
        else:
            views = bufs
            outs = (torch.empty(rows, k, dtype=torch.int32, device=dev),)
            fn = lambda b: sparsetopk.topk(b, k, lengths=lens, order=order, backend=BK, out=outs[0])  # noqa: E731
        try:
            for v in views[:2]:
                fn(v)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for v in views:
                    fn(v)
            graph.replay()
            torch.cuda.synchronize()
            times = []
            for _ in range(7):
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                graph.replay()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) * 1000.0 / len(views))
            times.sort()
            res[name] = round(times[len(times) // 2], 2)
            del graph
        except Exception as e:  # noqa: BLE001
            res[name] = f"error {type(e).__name__}: {e}"
    del bufs
    torch.cuda.empty_cache()
    return res


def bench(dev):
    cells = [
        ("decode 64x1344 k16 rank", 64, 1344, 16, "rank", torch.float32, None, False),
        ("decode 512x1344 k16 rank", 512, 1344, 16, "rank", torch.float32, None, False),
        ("decode 4096x4096 k16 rank", 4096, 4096, 16, "rank", torch.float32, None, False),
        ("decode 4096x4096 k16 rank bf16", 4096, 4096, 16, "rank", torch.bfloat16, None, False),
        ("decode 16384x8192 k16 rank", 16384, 8192, 16, "rank", torch.float32, None, False),
        ("long 4x40K(stride1M) k2048 any", 4, 1 << 20, 2048, "any", torch.float32, 40000, False),
        ("long 4x150K(stride1M) k2048 any", 4, 1 << 20, 2048, "any", torch.float32, 150000, False),
        ("long 16x1M k2048 any", 16, 1 << 20, 2048, "any", torch.float32, None, False),
        ("long 64x1M k2048 any", 64, 1 << 20, 2048, "any", torch.float32, None, False),
        ("long 64x1M k2048 rank", 64, 1 << 20, 2048, "rank", torch.float32, None, False),
        ("long 64x1M k2048 index", 64, 1 << 20, 2048, "index", torch.float32, None, False),
        ("long 64x1M k2048 any bf16", 64, 1 << 20, 2048, "any", torch.bfloat16, None, False),
        ("prefill 4096x128K ragged k2048 any", 4096, 131072, 2048, "any", torch.float32, 131072, True),
    ]
    out = []
    for name, rows, width, k, order, dt, lens, ragged in cells:
        r = bench_cell(dev, rows, width, k, order, dt, lens, ragged)
        log(f"BENCH {name:40s} {r}")
        out.append({"cell": name, **r})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--bench-only", action="store_true")
    ap.add_argument("--selftest-cpu", action="store_true")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    global BK
    if a.selftest_cpu:
        BK = REF
        dev = torch.device("cpu")
        correctness(dev, quick=True)
        log(f"selftest {counts}")
        return 0 if counts["fail"] == 0 else 1
    dev = torch.device("cuda")
    log(torch.cuda.get_device_name(), torch.__version__)
    from sparsetopk_nvidia_sm100._backend import _ext

    log("plans:", _ext().plan(64, 1 << 20, 2048, 0), _ext().plan(4096, 4096, 16, 0))
    log("availability:", sparsetopk.registry.availability(BK))
    result = {}
    if not a.bench_only:
        t = time.time()
        correctness(dev, a.quick)
        graph_and_stream(dev)
        result["correctness"] = dict(counts, seconds=round(time.time() - t, 1), fails=fails)
        log(f"CORRECTNESS {counts['cases'] - counts['fail']} passed, {counts['fail']} failed")
    if not a.no_bench:
        result["bench"] = bench(dev)
    with open(os.path.join(a.out, "nvidia_bench.json" if a.bench_only else "nvidia_dev.json"), "w") as f:
        json.dump(result, f, indent=1, default=str)
    return 0 if counts["fail"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
