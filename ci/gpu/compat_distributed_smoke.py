"""GPU smoke check of sparsetopk.compat and sparsetopk.distributed.

Each compat adapter runs on CUDA (the registry's pick, or --backend) and is
compared with the same adapter on CPU with the ``reference`` backend: exact
equality for ordered outputs, equal sets for FlashInfer's ``sorted=False``.
Then: the decode adapter captured in a CUDA graph and replayed on new data,
every adapter under ``torch.cuda.set_sync_debug_mode("error")`` (no host
sync), and ``distributed.topk`` over NCCL with one rank (both layouts, owner
routing) against the CPU reference on the unsharded rows.

    python ci/gpu/compat_distributed_smoke.py [--backend NAME] [--quick]
    python ci/gpu/compat_distributed_smoke.py --selftest-cpu   # harness check on CPU (gloo)

Exit status 1 on any mismatch.
"""

from __future__ import annotations

import argparse
import datetime
import socket
import sys
import time
import traceback

import torch

import sparsetopk
from sparsetopk import compat

REF = "reference"
results = {"pass": 0, "fail": 0, "skip": 0}


def log(*a):
    print(*a, flush=True)


def check(name: str, ok: bool, detail: str = "") -> None:
    results["pass" if ok else "fail"] += 1
    if not ok:
        log(f"FAIL {name} {detail}")


def gen(kind: str, shape, g: torch.Generator) -> torch.Tensor:
    if kind == "ties":
        x = torch.randint(-3, 4, shape, generator=g).to(torch.float32)
    else:
        x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    flat[:: 97] = -0.0
    flat[5:: 211] = float("nan")
    return x


def decode_case(dev, bk, next_n, B, width, top_k, kind, g):
    rows = B * next_n
    stride = width + 17
    buf = gen(kind, (rows, stride), g)
    buf[:, width:] = float("inf")  # outside every row
    seq_lens = torch.randint(0, width + 40, (B,), generator=g, dtype=torch.int32)
    seq_lens[0] = 1
    seq_lens[-1] = top_k  # exact fit row
    out = {}
    for d, b in ((dev, bk), ("cpu", REF)):
        lg = buf.to(d)[:, :width]
        idx = torch.full((rows, top_k), -777, dtype=torch.int32, device=d)
        compat.top_k_per_row_decode(lg, next_n, seq_lens.to(d), idx, rows, lg.stride(0), 1, top_k, backend=b)
        out[d] = idx.cpu()
    check(f"decode next_n={next_n} B={B} width={width} k={top_k} {kind}", torch.equal(out[dev], out["cpu"]))


def prefill_case(dev, bk, rows, width, top_k, kind, g):
    buf = gen(kind, (rows, width), g)
    starts = torch.randint(0, width // 2, (rows,), generator=g, dtype=torch.int32)
    ends = starts + torch.randint(-5, width // 2 + 50, (rows,), generator=g, dtype=torch.int32)
    out = {}
    for d, b in ((dev, bk), ("cpu", REF)):
        lg = buf.to(d)
        idx = torch.empty((rows, top_k), dtype=torch.int32, device=d)
        compat.top_k_per_row_prefill(lg, starts.to(d), ends.to(d), idx, rows, width, 1, top_k, backend=b)
        out[d] = idx.cpu()
    check(f"prefill rows={rows} width={width} k={top_k} {kind}", torch.equal(out[dev], out["cpu"]))


def msa_case(dev, bk, T, H, K, topk, layout, g):
    thk = gen("ties" if K % 2 else "random", (T, H, K), g)
    ms = thk if layout == "THK" else thk.permute(1, 2, 0).contiguous()
    nv = torch.randint(0, K + 3, (T,), generator=g, dtype=torch.int32)
    bt = torch.randint(0, 1 << 20, (T, H, K + 3), generator=g, dtype=torch.int32)
    out = {}
    for d, b in ((dev, bk), ("cpu", REF)):
        o = compat.sparse_topk_select(ms.to(d), topk, nv.to(d), force_begin_blocks=1, force_end_blocks=4,
                                      max_score_layout=layout, block_table=bt.to(d), backend=b)
        out[d] = o.cpu()
    check(f"msa {layout} T={T} H={H} K={K} topk={topk}", torch.equal(out[dev], out["cpu"]))


def flashinfer_case(dev, bk, B, d_, k, dtype, g):
    x = gen("ties", (B, d_), g).to(dtype)
    for sorted_ in (True, False):
        vd, idd = compat.top_k(x.to(dev), k, sorted=sorted_, backend=bk)
        vc, ic = compat.top_k(x, k, sorted=sorted_, backend=REF)
        if sorted_:
            ok = torch.equal(idd.cpu(), ic) and torch.equal(vd.cpu(), vc)
        else:
            ok = torch.equal(idd.cpu().sort(1).values, ic.sort(1).values)
        check(f"flashinfer B={B} d={d_} k={k} {dtype} sorted={sorted_}", ok and idd.dtype == torch.int64)


def graph_case(dev, bk, g):
    if dev != "cuda":
        results["skip"] += 1
        return
    rows, width, top_k, next_n = 8, 4096, 512, 2
    logits = gen("random", (rows, width), g).to(dev)
    seq_lens = torch.tensor([100, 4096, 700, 3000], dtype=torch.int32, device=dev)
    idx = torch.empty((rows, top_k), dtype=torch.int32, device=dev)

    def run():
        compat.top_k_per_row_decode(logits, next_n, seq_lens, idx, rows, width, 1, top_k, backend=bk)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        run()  # warm-up: backend selection and any lazy setup happen outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for trial in range(3):
        logits.copy_(gen("ties" if trial % 2 else "random", (rows, width), g))
        seq_lens.copy_(torch.randint(0, width + 10, (rows // next_n,), generator=g, dtype=torch.int32))
        idx.fill_(-777)
        graph.replay()
        ref = torch.empty((rows, top_k), dtype=torch.int32)
        compat.top_k_per_row_decode(logits.cpu(), next_n, seq_lens.cpu(), ref, rows, width, 1, top_k, backend=REF)
        check(f"decode graph replay #{trial}", torch.equal(idx.cpu(), ref))


def nosync_case(dev, bk, g):
    """Every adapter, after a warm-up, under torch.cuda.set_sync_debug_mode("error"):
    any host synchronisation (e.g. .item(), a device-to-host copy) raises."""
    if dev != "cuda":
        results["skip"] += 1
        return
    rows, width, k = 8, 9000, 256
    x = gen("random", (rows, width), g).to(dev)
    seq = torch.tensor([10, 9000, 300, 5000], dtype=torch.int32, device=dev)
    starts = torch.tensor([0, 5, 100, 8000, 0, 1, 2, 3], dtype=torch.int32, device=dev)
    ends = starts + 700
    idx = torch.empty((rows, k), dtype=torch.int32, device=dev)
    ms = gen("random", (4, 2, 300), g).to(dev)
    nv = torch.tensor([0, 30, 300, 299], dtype=torch.int32, device=dev)
    bt = torch.arange(4 * 2 * 300, dtype=torch.int32, device=dev).view(4, 2, 300)
    calls = {
        "decode": lambda: compat.top_k_per_row_decode(x, 2, seq, idx, rows, width, 1, k, backend=bk),
        "prefill": lambda: compat.top_k_per_row_prefill(x, starts, ends, idx, rows, width, 1, k, backend=bk),
        "msa": lambda: compat.sparse_topk_select(ms, 16, nv, None, 1, 2, "THK", bt, backend=bk),
        "msa-hkt": lambda: compat.sparse_topk_select(ms.permute(1, 2, 0), 16, 7, None, 1, 2, "HKT", backend=bk),
        "flashinfer": lambda: compat.top_k(x, k, sorted=True, backend=bk),
    }
    for name, fn in calls.items():
        fn()  # warm-up: selection, lazy setup
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn()
            ok, why = True, ""
        except RuntimeError as exc:
            ok, why = False, str(exc).splitlines()[0]
        finally:
            torch.cuda.set_sync_debug_mode("default")
        check(f"no host sync: {name}", ok, why)


def distributed_cases(dev, bk, g):
    import torch.distributed as dist

    import sparsetopk.distributed as sd

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    pg = "nccl" if dev == "cuda" else "gloo"
    dist.init_process_group(pg, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=60))
    try:
        rows, width, k = 16, 3000, 256
        x = gen("ties", (rows, width), g)
        lengths = torch.randint(-5, width + 20, (rows,), generator=g, dtype=torch.int32)
        exp = sparsetopk.topk(x, k, lengths=lengths, force_begin=3, force_end=40, return_values=True, backend=REF)
        for layout in ("strided", "blocked"):
            for owner in (None, 0):
                r = sd.topk(x.to(dev), k, lengths=lengths.to(dev), force_begin=3, force_end=40,
                            return_values=True, layout=layout, owner=owner, backend=bk)
                ok = torch.equal(r.indices.cpu(), exp.indices) and torch.equal(r.values.cpu(), exp.values)
                check(f"distributed {pg} world=1 {layout} owner={owner}", ok)
            r = sd.topk(x.to(dev), k, lengths=lengths.to(dev), force_begin=3, force_end=40,
                        return_values=True, layout=layout, backend=bk, async_op=True).wait()
            ok = torch.equal(r.indices.cpu(), exp.indices) and torch.equal(r.values.cpu(), exp.values)
            check(f"distributed {pg} world=1 {layout} async_op", ok)
    finally:
        dist.destroy_process_group()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None, help="backend for the device side (default: the registry's pick)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--selftest-cpu", action="store_true", help="run the harness on CPU (reference vs reference)")
    args = ap.parse_args(argv)
    if args.selftest_cpu:
        dev = "cpu"
    elif torch.cuda.is_available():
        dev = "cuda"
    else:
        log("no CUDA device; use --selftest-cpu")
        return 2
    bk = args.backend
    if dev == "cuda":
        log(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
        log("backends:", ", ".join(sorted(sparsetopk.registry.backends())))
    g = torch.Generator().manual_seed(20261129)
    t0 = time.time()
    widths = (300, 5000) if args.quick else (300, 5000, 70000)
    steps = [
        ("decode", lambda: [decode_case(dev, bk, nn, 3, w, k, kind, g)
                            for nn in (1, 2, 4) for w in widths for k in (16, 512, 2048) for kind in ("random", "ties")]),
        ("prefill", lambda: [prefill_case(dev, bk, 12, w, k, kind, g)
                             for w in widths for k in (64, 2048) for kind in ("random", "ties")]),
        ("msa", lambda: [msa_case(dev, bk, 5, 4, K, t, lay, g)
                         for K in (33, 512) for t in (8, 64) for lay in ("THK", "HKT")]),
        ("flashinfer", lambda: [flashinfer_case(dev, bk, 4, d_, k, dt, g)
                                for d_ in (2000, 129000) for k in (1, 50, 1024)
                                for dt in (torch.float32, torch.bfloat16, torch.float16)]),
        ("graph", lambda: graph_case(dev, bk, g)),
        ("nosync", lambda: nosync_case(dev, bk, g)),
        ("distributed", lambda: distributed_cases(dev, bk, g)),
    ]
    for name, fn in steps:
        ts = time.time()
        try:
            fn()
        except Exception:  # noqa: BLE001 - report and continue with the next step
            results["fail"] += 1
            log(f"FAIL {name}: exception\n{traceback.format_exc()}")
        log(f"{name}: done in {time.time() - ts:.1f} s (pass {results['pass']} fail {results['fail']})")
    log(f"compat/distributed smoke on {dev}: pass {results['pass']} fail {results['fail']} skip {results['skip']} "
        f"in {time.time() - t0:.1f} s")
    return 1 if results["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
