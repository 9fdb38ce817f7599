"""Context-parallel top-k over NCCL on several GPUs: correctness + one decode step's cost.

    python ci/gpu/distributed_nccl.py [--world N] [--out DIR] [--quick]
    python ci/gpu/distributed_nccl.py --selftest-gloo      # the same worker code on CPU, gloo, world 2

One process per GPU (torch.multiprocessing, spawn; NCCL, TCP rendezvous on a
free 127.0.0.1 port, ``device_id`` set). NVLink multicast stays off:
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1
are put in the environment before the ranks start.

1. Correctness: ``sparsetopk.distributed.topk`` (strided and blocked layouts,
   fp32/bf16, k in {1, 16, 2048}, orders rank/index/any, ties low/high, forced
   columns, per-row global lengths incl. 0 / tiny / negative / past the buffer,
   integer-valued ties across ranks, NaN / +-inf / +-0, dirty tails past the
   lengths, ``owner=`` routing, ``async_op``) against
   ``sparsetopk.topk(global_rows, backend="reference")`` computed on each
   rank's own device from the same seeded global rows. Bitwise (indices, and
   values when returned; sets for order="any").
2. Benchmark of one decode step (CUDA events, median of repeats; CUDA-graph
   replay when the NCCL collective can be captured, else eager): local select,
   exchange (all_gather alone), merge alone, the whole ``distributed.topk``
   call, and the whole unsharded row on one GPU; (a) ICP-like: 4096 rows
   (64 requests x 8 tokens x 8 heads), 1313 pages (168K tokens / 128), k=16;
   (b) DSA: rows 4 and 64, context 128K and 1M, k=2048.

Results: ``--out`` (default $OUT, else ./.gpu/nccl-out): distributed_nccl.json
and distributed_nccl.md. Exit status 1 on any mismatch, worker error or
timeout; 0 with a SKIP line when fewer than 2 GPUs are present.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import socket
import statistics
import sys
import tempfile
import time
import traceback

# Never NVLink multicast: set before torch / NCCL is loaded, inherited by the ranks.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
for _k, _v in NO_MULTICAST_ENV.items():
    os.environ[_k] = _v

import torch  # noqa: E402

REF = "reference"
DIST_TIMEOUT_S = 60
DEFAULT_DEADLINE_S = 140.0  # the parent kills the ranks after this (whole script stays <= 150 s)


def log(*a) -> None:
    print(*a, flush=True)


# ---------------------------------------------------------------------------
# the configuration every rank derives from the arguments
# ---------------------------------------------------------------------------


def make_config(args) -> dict:
    selftest = bool(args.selftest_gloo)
    quick = bool(args.quick)
    cfg = {
        "selftest": selftest,
        "quick": quick,
        "backend": "gloo" if selftest else "nccl",
        # correctness grid
        "rows": 8,
        "local_width": 1100,  # per rank: global 2200 at world 2, so k=2048 is a real selection
        "lengths_cases": 3 if quick else 5,
        "forced_cases": 2 if quick else 4,
        # time budgets, seconds from the worker's start (agreed collectively)
        "check_budget_s": 45.0 if quick else 60.0,
        "bench_budget_s": 115.0 if quick else 120.0,
        "repeats": 5 if quick else 7,
        "iters": 10,
        "graphs": not selftest and not args.no_graphs,
    }
    if selftest:
        cfg.update(local_width=300, repeats=3, iters=2, check_budget_s=40.0, bench_budget_s=55.0)
        cfg["bench"] = [
            dict(name="ICP-like (tiny)", rows=64, gwidth=131, k=16, order="rank", dtype="float32"),
            dict(name="DSA (tiny)", rows=4, gwidth=8192, k=2048, order="any", dtype="float32"),
        ]
    else:
        bench = [dict(name="ICP-like", rows=4096, gwidth=1313, k=16, order="rank", dtype="float32")]
        for gw in (131072, 1048576):
            for rows in (4, 64):
                bench.append(dict(name="DSA", rows=rows, gwidth=gw, k=2048, order="any", dtype="float32"))
        if quick:
            bench = [b for b in bench if not (b["name"] == "DSA" and b["gwidth"] == 1048576 and b["rows"] == 4)]
        cfg["bench"] = bench
    return cfg


# ---------------------------------------------------------------------------
# worker helpers
# ---------------------------------------------------------------------------


class Ctx:
    def __init__(self, rank, world, device, cfg, t0):
        self.rank, self.world, self.device, self.cfg, self.t0 = rank, world, device, cfg, t0
        self.cuda = device.type == "cuda"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def agree(self, ok: bool) -> bool:
        """True on every rank iff ``ok`` on every rank (one tiny all_reduce)."""
        import torch.distributed as dist

        t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(int(t.item()))

    def within(self, budget_s: float) -> bool:
        return self.agree(time.monotonic() - self.t0 < budget_s)

    def max_over_ranks(self, x: float) -> float:
        import torch.distributed as dist

        t = torch.tensor([x], dtype=torch.float64 if not self.cuda else torch.float32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())


def global_rows(seed: int, rows: int, gw: int, kind: str, lengths_t: torch.Tensor) -> torch.Tensor:
    """The same fp32 rows on every rank (CPU generator), with dirty tails."""
    g = torch.Generator().manual_seed(seed)
    if kind == "ties":  # integer values: exact ties inside and across ranks
        x = torch.randint(-2, 3, (rows, gw), generator=g).to(torch.float32)
        x[:, ::7] = -0.0
        x[:, 3::11] = 0.0
    else:  # special values
        x = torch.randn(rows, gw, generator=g)
        x[:, 1::13] = float("nan")
        x[:, 2::17] = float("inf")
        x[:, 5::19] = float("-inf")
        x[:, 7::23] = -0.0
        x[:, 9::29] = 0.0
    # dirty tails past each row's tensor length: never selectable, whatever they hold
    junk = torch.tensor([float("nan"), float("inf"), 1e30, -0.0], dtype=torch.float32)
    for r in range(rows):
        L = int(lengths_t[r])
        if 0 <= L < gw:
            n = gw - L
            x[r, L:] = junk.repeat((n + 3) // 4)[:n]
    return x


def shard(x: torch.Tensor, layout: str, rank: int, world: int) -> torch.Tensor:
    w = x.shape[1] // world
    if layout == "strided":
        return x[:, rank::world].contiguous()
    return x[:, rank * w:(rank + 1) * w]  # a row view: row stride = global width


def same(res, exp, order: str, with_values: bool):
    """Bitwise comparison on the host; (ok, detail)."""
    gi = res.indices.cpu().to(torch.int64)
    ei = exp.indices.cpu().to(torch.int64)
    if gi.shape != ei.shape:
        return False, f"shape {tuple(gi.shape)} != {tuple(ei.shape)}"
    gv = res.values.cpu().view(torch.int32).to(torch.int64) if with_values else None
    ev = exp.values.cpu().view(torch.int32).to(torch.int64)
    if order != "any":
        if not torch.equal(gi, ei):
            bad = (gi != ei).any(1).nonzero().flatten()[:2].tolist()
            return False, f"indices differ in rows {bad}: got {gi[bad[0]][:8].tolist()} exp {ei[bad[0]][:8].tolist()}"
        if with_values and not torch.equal(gv, ev):
            return False, "values differ"
        return True, ""
    n = (ei >= 0).sum(1)
    for r in range(ei.shape[0]):
        m = int(n[r])
        if (gi[r, m:] != -1).any():
            return False, f"row {r}: padding not -1 after {m} valid slots"
        a = sorted(zip(gi[r, :m].tolist(), gv[r, :m].tolist() if with_values else [0] * m, strict=True))
        b = sorted(zip(ei[r, :m].tolist(), ev[r, :m].tolist() if with_values else [0] * m, strict=True))
        if a != b:
            return False, f"row {r}: set differs"
    return True, ""


COMBOS = [(k, order, tie) for k in (1, 16, 2048) for order in ("rank", "index", "any") for tie in ("low", "high")]


def run_checks(c: Ctx, out: dict) -> None:
    import sparsetopk
    import sparsetopk.distributed as sd

    cfg, rank, world, dev = c.cfg, c.rank, c.world, c.device
    rows, W = cfg["rows"], cfg["local_width"]
    gw = W * world
    base = [0, 1, 3, W - 1, W + 1, gw + 100, -5, gw // 2 + 3]
    lens_cpu = torch.tensor((base * ((rows + len(base) - 1) // len(base)))[:rows], dtype=torch.int32)
    lengths_all = [None, lens_cpu.to(dev), lens_cpu.to(torch.int64).to(dev), 1, gw + 50][: cfg["lengths_cases"]]
    forced_all = [(0, 0), (4, 64), (W + 3, 1), (0, gw + 7)][: cfg["forced_cases"]]
    st = out["checks"]
    spin = 0

    def record(name, ok, detail=""):
        st["pass" if ok else "fail"] += 1
        if not ok and len(st["failures"]) < 20:
            st["failures"].append(f"{name}: {detail}")

    stopped = False
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("ties", "special"):
            if not c.within(cfg["check_budget_s"]):
                stopped = True
                break
            seed = 1000 + world * 10 + (dtype == torch.bfloat16) * 2 + (kind == "ties")
            xg = global_rows(seed, rows, gw, kind, lens_cpu).to(dtype).to(dev)
            for layout in ("strided", "blocked"):
                local = shard(xg, layout, rank, world)
                for li, lengths in enumerate(lengths_all):
                    for fb, fe in forced_all:
                        k, order, tie = COMBOS[spin % len(COMBOS)]
                        rv = spin % 5 != 4  # mostly with values
                        spin += 1
                        name = (f"{str(dtype)[6:]} {kind} {layout} lengths#{li} fb={fb} fe={fe} k={k} "
                                f"order={order} tie={tie} values={rv}")
                        try:
                            res = sd.topk(local, k, lengths=lengths, force_begin=fb, force_end=fe, tie_break=tie,
                                          order=order, return_values=rv, layout=layout)
                            exp = sparsetopk.topk(xg, k, lengths=lengths, force_begin=fb, force_end=fe,
                                                  tie_break=tie, order="rank" if order == "any" else order,
                                                  return_values=True, backend=REF)
                            ok, why = same(res, exp, order, rv)
                            if ok and not rv and res.values is not None:
                                ok, why = False, "values returned without return_values"
                        except Exception as e:  # noqa: BLE001
                            ok, why = False, f"{type(e).__name__}: {e}"
                        record(name, ok, why)
        if stopped:
            break
    if not stopped and c.within(cfg["check_budget_s"]):
        # owner routing and async exchanges (fp32 special rows, tensor lengths, forced columns)
        xg = global_rows(77 + world, rows, gw, "special", lens_cpu).to(dev)
        lt = lens_cpu.to(dev)
        exp = sparsetopk.topk(xg, 16, lengths=lt, force_begin=4, force_end=64, return_values=True, backend=REF)
        per_row = [(r * 5 + 1) % world for r in range(rows)]
        for layout in ("strided", "blocked"):
            local = shard(xg, layout, rank, world)
            for owner in (world - 1, per_row, torch.tensor(per_row)):
                owners = [owner] * rows if isinstance(owner, int) else [int(o) for o in owner]
                mine = [r for r in range(rows) if owners[r] == rank]
                name = f"owner={'int' if isinstance(owner, int) else type(owner).__name__} {layout}"
                try:
                    res = sd.topk(local, 16, lengths=lt, force_begin=4, force_end=64, return_values=True,
                                  layout=layout, owner=owner)
                    sel = torch.tensor(mine, dtype=torch.int64, device=dev)
                    e = type(exp)(exp.indices.index_select(0, sel), exp.values.index_select(0, sel))
                    ok, why = same(res, e, "rank", True)
                except Exception as ex:  # noqa: BLE001
                    ok, why = False, f"{type(ex).__name__}: {ex}"
                record(name, ok, why)
            name = f"async_op two in flight {layout}"
            try:
                e2 = sparsetopk.topk(xg, 2048, lengths=lt, order="rank", return_values=True, backend=REF)
                p1 = sd.topk(local, 16, lengths=lt, force_begin=4, force_end=64, return_values=True, layout=layout,
                             async_op=True)
                p2 = sd.topk(local, 2048, lengths=lt, order="any", return_values=True, layout=layout, async_op=True)
                r2, r1 = p2.wait(), p1.wait()
                ok1, w1 = same(r1, exp, "rank", True)
                ok2, w2 = same(r2, e2, "any", True)
                ok, why = ok1 and ok2, w1 or w2
            except Exception as ex:  # noqa: BLE001
                ok, why = False, f"{type(ex).__name__}: {ex}"
            record(name, ok, why)
            # determinism: the same call twice gives the same bits
            name = f"replay bit-identical {layout}"
            try:
                a = sd.topk(local, 2048, lengths=lt, force_end=3, order="index", return_values=True, layout=layout)
                b = sd.topk(local, 2048, lengths=lt, force_end=3, order="index", return_values=True, layout=layout)
                ok = torch.equal(a.indices, b.indices) and torch.equal(a.values.view(torch.int32),
                                                                       b.values.view(torch.int32))
                why = "" if ok else "two identical calls differ"
            except Exception as ex:  # noqa: BLE001
                ok, why = False, f"{type(ex).__name__}: {ex}"
            record(name, ok, why)
    else:
        stopped = True
    st["stopped_early"] = stopped
    c.sync()


# ---------------------------------------------------------------------------
# benchmark
# ---------------------------------------------------------------------------


def measure(c: Ctx, fn, note: dict, key: str):
    """Median time per call in µs (rank-local and max over ranks).

    GPU: CUDA events around ``iters`` calls; a CUDA graph of one call is
    captured and replayed when every rank manages to capture it, else eager.
    """
    import torch.distributed as dist

    cfg = c.cfg
    for _ in range(3):  # warm-up: registry choices, buffers, JIT
        fn()
    c.sync()
    graph = None
    if c.cuda and cfg["graphs"]:
        err = ""
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            graph = g
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:200]}"
            graph = None
        try:
            c.sync()
        except Exception:  # noqa: BLE001
            pass
        if not c.agree(graph is not None):
            if err:
                note.setdefault("graph_errors", {})[key] = err
            graph = None
    note.setdefault("mode", {})[key] = "graph" if graph is not None else "eager"
    run = graph.replay if graph is not None else fn
    if graph is not None:
        run()
        c.sync()
    times = []
    for _ in range(cfg["repeats"]):
        c.sync()
        dist.barrier()
        if c.cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(cfg["iters"]):
                run()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1000.0 / cfg["iters"])
        else:
            t = time.perf_counter()
            for _ in range(cfg["iters"]):
                run()
            times.append((time.perf_counter() - t) * 1e6 / cfg["iters"])
    med = statistics.median(times)
    del graph
    return med, c.max_over_ranks(med)


def run_bench(c: Ctx, out: dict, save) -> None:
    import torch.distributed as dist

    cfg = c.cfg
    # the collective sparsetopk.distributed uses (all_gather_into_tensor is deprecated in newer torch)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    for b in cfg["bench"]:
        if not c.within(cfg["bench_budget_s"]):
            out["bench_notes"].append(f"skipped {b['name']} rows={b['rows']} width={b['gwidth']}: time budget")
            continue
        bench_shape(c, b, out, gather)
        save("bench")  # partial results survive a kill at the deadline
        if c.cuda:
            torch.cuda.empty_cache()


def bench_shape(c: Ctx, b: dict, out: dict, gather) -> None:
    import sparsetopk
    import sparsetopk.distributed as sd
    from sparsetopk import registry
    from sparsetopk.validation import make_merge_call, make_topk_call

    rank, world, dev = c.rank, c.world, c.device
    rows, gw0, k, order = b["rows"], b["gwidth"], b["k"], b["order"]
    W = -(-gw0 // world)  # pad the global width to W*world; lengths exclude the pad
    gw = W * world
    dtype = getattr(torch, b["dtype"])
    gen = torch.Generator(device=dev).manual_seed(4242 + rows + gw0)
    xg = torch.randn(rows, gw, generator=gen, device=dev, dtype=torch.float32).to(dtype)
    local = xg[:, rank::world].contiguous()
    whole = xg[:, :gw0]  # the unsharded row on one GPU (a view when padded)
    lens = torch.full((rows,), gw0, dtype=torch.int32, device=dev)
    send = torch.empty((2, rows, k), dtype=torch.int32, device=dev)
    s_idx, s_val = send[0], send[1].view(torch.float32)
    recv = torch.empty((world, 2, rows, k), dtype=torch.int32, device=dev)
    # candidates for the merge alone: the real gathered lists
    sparsetopk.topk(local, k, lengths=lens, index_scale=world, index_offset=rank, order="any",
                    return_values=True, out=(s_idx, s_val))
    gather(recv.view(-1), send.view(-1))
    c_idx = recv[:, 0].permute(1, 0, 2)
    c_val = recv[:, 1].view(torch.float32).permute(1, 0, 2)
    m_idx = torch.empty((rows, k), dtype=torch.int32, device=dev)
    m_val = torch.empty((rows, k), dtype=torch.float32, device=dev)
    w_idx = torch.empty((rows, k), dtype=torch.int32, device=dev)
    recv2 = torch.empty_like(recv)
    picks = {
        "local": registry.select(make_topk_call(local, k, lengths=lens, index_scale=world, index_offset=rank,
                                                order="any", return_values=True)).name,
        "merge": registry.select(make_merge_call(c_idx, c_val, k, order=order)).name,
        "whole": registry.select(make_topk_call(whole, k, lengths=lens, order=order)).name,
    }
    # correctness at the benchmark shape: distributed == whole row on one GPU
    res = sd.topk(local, k, lengths=lens, order=order)
    ref = sparsetopk.topk(whole, k, lengths=lens, order=order)
    a, e = res.indices, ref.indices
    if order == "any":
        a, e = a.sort(1).values, e.sort(1).values
    ok = bool(torch.equal(a, e))
    st = out["checks"]
    st["pass" if ok else "fail"] += 1
    if not ok:
        st["failures"].append(f"bench shape {b['name']} rows={rows} width={gw0}: distributed != whole row")

    fns = {
        "local_us": lambda: sparsetopk.topk(local, k, lengths=lens, index_scale=world, index_offset=rank,
                                            order="any", return_values=True, out=(s_idx, s_val)),
        "exchange_us": lambda: gather(recv2.view(-1), send.view(-1)),
        "merge_us": lambda: sparsetopk.merge(c_idx, c_val, k, order=order, out=(m_idx, m_val)),
        "total_us": lambda: sd.topk(local, k, lengths=lens, order=order),
        "whole_us": lambda: sparsetopk.topk(whole, k, lengths=lens, order=order, out=w_idx),
    }
    row = dict(b, world=world, local_width=W, padded_gwidth=gw, picks=picks,
               exchange_bytes=world * 2 * rows * k * 4, check_ok=ok)
    note: dict = {}
    for key, fn in fns.items():
        try:
            med, mx = measure(c, fn, note, key)
            row[key] = round(med, 2)
            row[key.replace("_us", "_max_us")] = round(mx, 2)
        except Exception as ex:  # noqa: BLE001 - ranks may now be out of step: stop this worker
            out["bench_notes"].append(f"{b['name']} rows={rows} {key}: {type(ex).__name__}: {str(ex)[:200]}")
            raise
    row.update(note)
    out["bench"].append(row)
    if rank == 0:
        log(f"[bench] {b['name']} rows={rows} width={gw0} k={k}: " +
            " ".join(f"{kk}={row.get(kk)}" for kk in fns) + f" mode={note.get('mode')}")


# ---------------------------------------------------------------------------
# the worker
# ---------------------------------------------------------------------------


def worker(rank: int, world: int, port: int, cfg: dict, result_dir: str) -> None:
    import torch.distributed as dist

    t0 = time.monotonic()
    path = os.path.join(result_dir, f"rank{rank}.json")
    out = {"rank": rank, "phase": "start", "checks": {"pass": 0, "fail": 0, "failures": []}, "bench": [],
           "bench_notes": [], "error": None}

    def save(phase):
        out["phase"] = phase
        out["elapsed_s"] = round(time.monotonic() - t0, 2)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f)
        os.replace(tmp, path)

    failed = False
    try:
        if cfg["backend"] == "nccl":
            device = torch.device("cuda", rank)
            torch.cuda.set_device(device)
            out["device_name"] = torch.cuda.get_device_name(device)
            kw = dict(device_id=device)
        else:
            torch.set_num_threads(1)
            device = torch.device("cpu")
            out["device_name"] = "cpu"
            kw = {}
        try:
            dist.init_process_group(cfg["backend"], init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=world, timeout=datetime.timedelta(seconds=DIST_TIMEOUT_S), **kw)
        except TypeError:  # a torch without device_id
            dist.init_process_group(cfg["backend"], init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                    world_size=world, timeout=datetime.timedelta(seconds=DIST_TIMEOUT_S))
        c = Ctx(rank, world, device, cfg, t0)
        out["init_s"] = round(time.monotonic() - t0, 2)
        save("init")
        run_checks(c, out)
        out["checks_s"] = round(time.monotonic() - t0, 2)
        save("checks")
        run_bench(c, out, save)
        dist.barrier()
        save("done")
    except Exception:  # noqa: BLE001 - reported to the parent
        out["error"] = traceback.format_exc()[-4000:]
        failed = True
        save("error")
    try:
        if not failed:
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    if failed:
        os._exit(1)  # the parent's join stops the other ranks at once


# ---------------------------------------------------------------------------
# the parent
# ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, cfg: dict, result_dir: str, deadline_s: float):
    import torch.multiprocessing as mp

    ctx = mp.start_processes(worker, args=(world, free_port(), cfg, result_dir), nprocs=world, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + deadline_s
    status = "ok"
    done_since = None
    try:
        while True:
            try:
                if ctx.join(timeout=1.0):
                    break
            except Exception as e:  # noqa: BLE001 - a rank died: join stopped the others
                status = f"rank failed: {type(e).__name__}: {str(e)[:300]}"
                break
            now = time.monotonic()
            finished = all(_phase(result_dir, r) in ("done", "error") for r in range(world))
            if finished:  # results written; do not wait forever on process-group teardown
                done_since = done_since or now
                if now - done_since > 15:
                    break
            if now > deadline:
                status = f"timeout: ranks still running after {deadline_s:.0f} s"
                break
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.terminate()
        for p in ctx.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(2)
    results = []
    for r in range(world):
        try:
            with open(os.path.join(result_dir, f"rank{r}.json")) as f:
                results.append(json.load(f))
        except Exception:  # noqa: BLE001
            results.append({"rank": r, "phase": "none", "error": "no result file",
                            "checks": {"pass": 0, "fail": 0, "failures": []}, "bench": [], "bench_notes": []})
    return status, results


def _phase(result_dir: str, r: int) -> str:
    try:
        with open(os.path.join(result_dir, f"rank{r}.json")) as f:
            return json.load(f).get("phase", "")
    except Exception:  # noqa: BLE001
        return ""


def fmt(x) -> str:
    return "-" if x is None else (f"{x:.1f}" if x < 1000 else f"{x:.0f}")


def markdown(summary: dict) -> str:
    lines = []
    env = summary["env"]
    lines.append(f"Context-parallel top-k, `sparsetopk.distributed.topk` (strided shards, "
                 f"{summary['world']} x {env['devices'][0] if env['devices'] else '?'}, {summary['backend'].upper()}"
                 f"{' ' + str(env.get('nccl')) if env.get('nccl') else ''}, torch {env['torch']}, {summary['date']}). "
                 f"µs per call, median of {summary['config']['repeats']} x {summary['config']['iters']} "
                 f"(rank 0; max over ranks in the JSON). Command: `{summary['command']}`")
    lines.append("")
    lines.append("| case | rows | global width | k | order | local W | local select | exchange (all_gather) | merge "
                 "| total (select+exchange+merge) | whole row, 1 GPU | total / whole | mode | picks (local / merge / whole) |")
    lines.append("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for b in summary["bench"]:
        tot, whole = b.get("total_us"), b.get("whole_us")
        ratio = f"{tot / whole:.2f}" if tot and whole else "-"
        modes = set((b.get("mode") or {}).values())
        mode = modes.pop() if len(modes) == 1 else ",".join(f"{k[:-3]}:{v}" for k, v in (b.get("mode") or {}).items())
        p = b["picks"]
        lines.append(f"| {b['name']} | {b['rows']} | {b['gwidth']} | {b['k']} | {b['order']} | {b['local_width']} | "
                     f"{fmt(b.get('local_us'))} | {fmt(b.get('exchange_us'))} | {fmt(b.get('merge_us'))} | "
                     f"{fmt(tot)} | {fmt(whole)} | {ratio} | {mode} | {p['local']} / {p['merge']} / {p['whole']} |")
    c = summary["checks"]
    lines.append("")
    lines.append(f"Correctness: {c['pass']} passed, {c['fail']} failed (summed over {summary['world']} ranks; "
                 f"against `sparsetopk.topk(..., backend=\"reference\")` on the unsharded rows, bitwise).")
    for n in summary.get("notes", []):
        lines.append(f"- {n}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--world", type=int, default=None, help="ranks (default: torch.cuda.device_count())")
    ap.add_argument("--out", default=None, help="results folder (default $OUT, else ./.gpu/nccl-out)")
    ap.add_argument("--quick", action="store_true", help="smaller correctness grid, fewer repeats")
    ap.add_argument("--selftest-gloo", action="store_true", help="run the worker code on CPU with gloo, world 2")
    ap.add_argument("--no-graphs", action="store_true", help="eager timing only (no CUDA-graph capture)")
    ap.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S, help="kill the ranks after this many s")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable)] + sys.argv)
    out_dir = args.out or (os.path.join(".gpu", "nccl-selftest") if args.selftest_gloo else
                           (os.environ.get("OUT") or os.path.join(".gpu", "nccl-out")))

    if args.selftest_gloo:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_gloo_available():
            log("SKIP distributed_nccl selftest: torch.distributed with gloo is not available")
            return 0
        world = args.world or 2
    else:
        n_gpu = torch.cuda.device_count() if torch.cuda.is_available() else 0
        world = args.world if args.world is not None else n_gpu
        if n_gpu < 2 or world < 2:
            log(f"needs >= 2 GPUs (found {n_gpu}, world {world})")
            log("SKIP distributed_nccl: fewer than 2 GPUs")
            return 0
        if world > n_gpu:
            log(f"needs {world} GPUs, found {n_gpu}")
            log(f"SKIP distributed_nccl: --world {world} > {n_gpu} GPUs")
            return 0
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_nccl_available():
            log("SKIP distributed_nccl: torch.distributed with NCCL is not available")
            return 0

    cfg = make_config(args)
    log(f"distributed_nccl: world={world} backend={cfg['backend']} quick={cfg['quick']} out={out_dir} "
        f"env={' '.join(f'{k}={os.environ[k]}' for k in NO_MULTICAST_ENV)}")
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="stk-nccl-") as rd:
        status, results = run_ranks(world, cfg, rd, args.deadline)

    checks = {"pass": 0, "fail": 0, "failures": []}
    notes = []
    for r in results:
        checks["pass"] += r["checks"]["pass"]
        checks["fail"] += r["checks"]["fail"]
        checks["failures"] += [f"rank {r['rank']}: {x}" for x in r["checks"]["failures"]]
        if r.get("error"):
            notes.append(f"rank {r['rank']} error (phase {r.get('phase')}): {r['error'].strip().splitlines()[-1]}")
        if r["checks"].get("stopped_early"):
            notes.append(f"rank {r['rank']}: correctness grid stopped early (time budget)")
    r0 = results[0]
    notes += r0.get("bench_notes", [])
    for b in r0.get("bench", []):
        for k, v in (b.get("graph_errors") or {}).items():
            notes.append(f"{b['name']} rows={b['rows']} {k}: CUDA graph not captured, eager ({v})")
    if cfg["backend"] == "nccl" and any((b.get("mode") or {}).get("total_us") == "eager" for b in r0.get("bench", [])):
        notes.append("the NCCL collective could not be captured in a CUDA graph here: eager timings (launch costs included)")
    nccl = None
    if not cfg["selftest"]:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version())) if isinstance(torch.cuda.nccl.version(), tuple) \
                else str(torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001
            nccl = None
    summary = {
        "script": "ci/gpu/distributed_nccl.py",
        "command": command,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "world": world,
        "backend": cfg["backend"],
        "status": status,
        "env": {
            "devices": [r.get("device_name") for r in results],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nccl": nccl,
            "python": sys.version.split()[0],
            "no_multicast_env": {k: os.environ.get(k) for k in NO_MULTICAST_ENV},
        },
        "config": {k: v for k, v in cfg.items() if k != "bench"},
        "checks": checks,
        "bench": r0.get("bench", []),
        "ranks": [{k: r.get(k) for k in ("rank", "phase", "init_s", "checks_s", "elapsed_s", "error")} for r in results],
        "notes": notes,
        "wall_s": None,
    }
    summary["wall_s"] = round(time.monotonic() - t_start, 1)
    md = markdown(summary)
    with open(os.path.join(out_dir, "distributed_nccl.json"), "w") as f:
        json.dump(summary, f, indent=1)
    with open(os.path.join(out_dir, "distributed_nccl.md"), "w") as f:
        f.write(md)

    ok = status == "ok" and checks["fail"] == 0 and all(r.get("phase") == "done" for r in results)
    log("")
    log(md)
    for x in checks["failures"][:20]:
        log(f"FAIL {x}")
    for r in results:
        if r.get("error"):
            log(f"--- rank {r['rank']} error ---\n{r['error']}")
    log(f"{'PASS' if ok else 'FAIL'} distributed_nccl: world={world} backend={cfg['backend']} checks "
        f"{checks['pass']} passed / {checks['fail']} failed, bench cases {len(summary['bench'])}, status {status}, "
        f"wall {summary['wall_s']} s -> {out_dir}/distributed_nccl.{{json,md}}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
