"""Run cells: time every serving backend and the baselines, derive speedups and regret.

Nothing here is fatal per backend: a backend that raises (or is not
capturable) in a cell gets its error recorded in that cell and the run goes
on. Only a CUDA error that poisons the context stops useful timing, and then
the remaining cells record the error too (the JSON is still written).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Dict, List, Optional, Sequence

import torch

from .. import registry
from ..validation import make_merge_call, make_topk_call
from . import baselines as bl
from .data import build_inputs, estimate_alloc, floor_bytes, plan_views
from .scenarios import Cell, geometry
from .timing import time_cpu, time_cuda

REGRET_GEOMEAN_MAX = 1.05  # issue 6 targets on the H200
REGRET_WORST_MAX = 1.25


@dataclasses.dataclass
class RunConfig:
    device: torch.device
    backends: Optional[Sequence[str]] = None  # only these sparsetopk backends (None: all serving)
    include_interpreted: bool = False  # time Triton-interpreter backends on the CPU
    baselines: bool = True  # torch.topk (+ FlashInfer / vLLM when importable)
    baseline_names: Optional[Sequence[str]] = None  # only these baselines (None: every installed one)
    l2_bytes: int = 0
    copy_bw: float = float("nan")  # bytes/s, read + write
    rotate_factor: float = 2.5  # one pass over the views reads > this many L2s
    max_views: int = 2048
    max_alloc: int = 8 << 30  # input bytes per cell
    target_s: float = 0.15  # device seconds of timed replays per backend and timer
    cpu_repeats: int = 5
    budget_s: Optional[float] = None  # stop starting cells after this many seconds
    check: bool = False  # compare each backend's answer with the reference backend's
    eager: bool = True
    return_values: bool = False


def _err(exc: BaseException) -> str:
    msg = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {msg[0] if msg else ''}"[:300]


def _make_call(cell: Cell, view: dict, cfg: RunConfig):
    if cell.op == "merge":
        return make_merge_call(view["indices"], view["values"], cell.k, order=cell.order)
    return make_topk_call(view["scores"], cell.k, lengths=view["lengths"], starts=view["starts"],
                          index_scale=cell.index_scale, index_offset=cell.index_offset,
                          order=cell.order, return_values=cfg.return_values)


def _backend_fn(cell: Cell, views: List[dict], name: str, cfg: RunConfig, out) -> Callable[[int], object]:
    import sparsetopk

    n = len(views)
    if cell.op == "merge":
        return lambda i: sparsetopk.merge(views[i % n]["indices"], views[i % n]["values"], cell.k,
                                          order=cell.order, backend=name, out=out)
    return lambda i: sparsetopk.topk(views[i % n]["scores"], cell.k, lengths=views[i % n]["lengths"],
                                     starts=views[i % n]["starts"], index_scale=cell.index_scale,
                                     index_offset=cell.index_offset, order=cell.order,
                                     return_values=cfg.return_values, backend=name, out=out)


def _outputs(cell: Cell, cfg: RunConfig):
    idx = torch.empty((cell.rows, cell.k), dtype=torch.int32, device=cfg.device)
    want_vals = cell.op == "merge" or cfg.return_values
    vals = torch.empty((cell.rows, cell.k), dtype=torch.float32, device=cfg.device) if want_vals else None
    return idx, vals


def _time(fn, n_views: int, cfg: RunConfig) -> Dict:
    if cfg.device.type == "cuda":
        calls = max(n_views, 16)
        calls = -(-calls // n_views) * n_views
        return time_cuda(fn, n_views, calls, target_s=cfg.target_s, eager=cfg.eager)
    return time_cpu(fn, n_views, repeats=cfg.cpu_repeats)


def _answer(out, order):
    idx = out[0].detach().to("cpu", torch.int64)
    if order == "any":
        idx = idx.sort(dim=1).values
    return idx


def run_cell(cell: Cell, cfg: RunConfig) -> dict:
    rec = cell.to_json()
    rec["results"] = {}
    rec["skipped"] = {}
    if cell.op == "topk":
        geo = geometry(cell)
        rec["geometry"] = geo.describe()
    else:
        geo = None
    fb = floor_bytes(cell, geo, return_values=cfg.return_values)
    rec["floor_bytes"] = fb
    bw = cfg.copy_bw
    rec["floor_us"] = fb / bw * 1e6 if bw and math.isfinite(bw) and bw > 0 else None
    one = estimate_alloc(cell, 1)
    if one > cfg.max_alloc:
        rec["error"] = f"inputs need {one / 2**30:.2f} GiB, over the per-cell limit {cfg.max_alloc / 2**30:.2f} GiB"
        return rec
    n_views = plan_views(cell, cfg.l2_bytes, cfg.rotate_factor, cfg.max_views, cfg.max_alloc, cfg.device)
    try:
        inp = build_inputs(cell, n_views, cfg.device)
    except Exception as exc:
        rec["error"] = f"building inputs failed: {_err(exc)}"
        _release(cfg)
        return rec
    rec["n_views"] = inp.n_views
    rec["rotate_bytes"] = inp.rotate_bytes
    rec["alloc_bytes"] = inp.alloc_bytes
    try:
        call = _make_call(cell, inp.views[0], cfg)
        cands = registry.candidates(call, include_interpreted=True)
        rec["candidates"] = [b.name for b in cands]
    except Exception as exc:
        rec["error"] = f"registry failed: {_err(exc)}"
        del inp
        _release(cfg)
        return rec
    try:
        rec["pick"] = registry.select(call).name
    except Exception as exc:
        rec["pick"] = None
        rec["pick_error"] = _err(exc)
    out = _outputs(cell, cfg)
    ref_answer = None
    for b in cands:
        name = b.name
        if cfg.backends and name not in cfg.backends:
            rec["skipped"][name] = "filtered out (--backend)"
            continue
        if cfg.device.type == "cpu" and getattr(b, "interpreted", False) and not cfg.include_interpreted:
            rec["skipped"][name] = "interpreted backend on the CPU (use --include-interpreted)"
            continue
        r = {"kind": "backend", "version": str(getattr(b, "version", ""))}
        try:
            fn = _backend_fn(cell, inp.views, name, cfg, out)
            r.update(_time(fn, inp.n_views, cfg))
            if cfg.check:
                fn(0)
                got = _answer(out, cell.order)
                if ref_answer is None:
                    ref_answer = _reference_answer(cell, inp.views[0], cfg)
                r["check"] = "ok" if torch.equal(got, ref_answer) else "MISMATCH"
        except Exception as exc:
            r["error"] = _err(exc)
            _recover(cfg)
        rec["results"][name] = r
    if cfg.baselines:
        for name in bl.installed():
            if cfg.baseline_names and name not in cfg.baseline_names:
                continue
            factory = bl.BASELINES[name][0]
            r = {"kind": "baseline"}
            try:
                fn = factory(cell, inp)
            except bl.Unsupported as why:
                rec["skipped"][name] = f"n/a: {why}"
                continue
            except Exception as exc:
                r["error"] = _err(exc)
                rec["results"][name] = r
                continue
            try:
                r.update(_time(fn, inp.n_views, cfg))
            except Exception as exc:
                r["error"] = _err(exc)
                _recover(cfg)
            rec["results"][name] = r
    del inp, out
    _release(cfg)
    derive(rec)
    return rec


def _reference_answer(cell: Cell, view: dict, cfg: RunConfig):
    idx, vals = _outputs(cell, cfg)
    _backend_fn(cell, [view], "reference", cfg, (idx, vals))(0)
    return _answer((idx, vals), cell.order)


def _recover(cfg: RunConfig) -> None:
    if cfg.device.type == "cuda":
        try:
            torch.cuda.synchronize()
        except Exception:
            pass


def _release(cfg: RunConfig) -> None:
    if cfg.device.type == "cuda":
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:
            pass


def derive(rec: dict) -> None:
    """Speedups over torch.topk, % of copy bandwidth, best backend and the pick's regret."""
    res = rec.get("results", {})
    base = res.get("torch.topk", {}).get("us")
    floor = rec.get("floor_us")
    for r in res.values():
        us = r.get("us")
        if us is None or not (us > 0):
            continue
        r["speedup_vs_torch"] = base / us if base else None
        r["pct_bw"] = 100.0 * floor / us if floor else None
    timed = {n: r["us"] for n, r in res.items() if r.get("kind") == "backend" and r.get("us")}
    if timed:
        best = min(timed, key=timed.get)
        rec["best"] = best
        rec["best_us"] = timed[best]
        pick = rec.get("pick")
        if pick in timed:
            rec["regret"] = timed[pick] / timed[best]
        else:
            rec["regret"] = None
            if pick in res and res[pick].get("error"):
                rec["pick_failed"] = True
    else:
        rec["best"] = None
        rec["regret"] = None
    tgt = _target(rec)
    if tgt is not None:
        rec["target"] = tgt


def _target(rec: dict) -> Optional[dict]:
    """The issue-3 target of a cell, against its best backend's time."""
    limit_us, floor_x = rec.get("target_us"), rec.get("target_floor_x")
    if limit_us is None and floor_x is None:
        return None
    t: dict = {"best": rec.get("best"), "best_us": rec.get("best_us")}
    floor = rec.get("floor_us")
    if limit_us is None and floor:
        limit_us = floor_x * floor
        t["what"] = f"<= {floor_x:g}x the bytes-read floor ({limit_us:.1f} us)"
    elif limit_us is not None:
        t["what"] = f"<= {limit_us:g} us"
    else:
        return None
    t["limit_us"] = limit_us
    t["met"] = None if rec.get("best_us") is None else bool(rec["best_us"] <= limit_us)  # None: not measured
    if floor and rec.get("best_us"):
        t["x_floor"] = rec["best_us"] / floor
    return t


def bf16_vs_fp32(cells: List[dict]) -> List[dict]:
    """Issue 3: bf16 input at least as fast as fp32 in bytes per second (best backend, N(0,1))."""
    by_shape: Dict[tuple, Dict[str, dict]] = {}
    for c in cells:
        if c.get("op") != "topk" or c.get("dist") != "normal" or not c.get("best_us"):
            continue
        key = (c["scenario"], c["label"], c["k"], c["order"])
        by_shape.setdefault(key, {})[c["dtype"]] = c
    out = []
    for (scen, label, k, order), d in by_shape.items():
        if "float32" in d and "bfloat16" in d:
            f, b = d["float32"], d["bfloat16"]
            # valid bytes per second: fp32 reads 4 bytes per column, bf16 2
            f_bps = f["floor_bytes"] / (f["best_us"] * 1e-6)
            b_bps = b["floor_bytes"] / (b["best_us"] * 1e-6)
            out.append({"cell": f"{scen}:{label} k={k} {order}", "fp32_GBps": f_bps / 1e9, "bf16_GBps": b_bps / 1e9,
                        "fp32_best": f["best"], "bf16_best": b["best"], "met": b_bps >= f_bps})
    return out


def summarize(cells: List[dict]) -> dict:
    regrets = [(c["regret"], c["name"]) for c in cells if c.get("regret")]
    s = {
        "cells": len(cells),
        "timed_cells": sum(1 for c in cells if c.get("results")),
        "skipped_cells": sum(1 for c in cells if c.get("error")),
        "backend_errors": sum(1 for c in cells for r in c.get("results", {}).values() if r.get("error")),
        "regret_cells": len(regrets),
        "pick_failed_cells": sum(1 for c in cells if c.get("pick_failed")),
        "pick_untimed_cells": sum(1 for c in cells if c.get("results") and c.get("pick") not in c["results"]),
    }
    if regrets:
        s["regret_geomean"] = math.exp(sum(math.log(r) for r, _ in regrets) / len(regrets))
        worst = max(regrets)
        s["regret_worst"] = worst[0]
        s["regret_worst_cell"] = worst[1]
        s["regret_target_met"] = s["regret_geomean"] <= REGRET_GEOMEAN_MAX and worst[0] <= REGRET_WORST_MAX
    else:
        s["regret_geomean"] = None
        s["regret_worst"] = None
    targets = []
    for c in cells:
        t = c.get("target") or _target(c)
        if t is not None:
            targets.append(dict(t, cell=c["name"]))
    if targets:
        s["targets"] = targets
        s["targets_met"] = sum(1 for t in targets if t["met"])
        s["targets_measured"] = sum(1 for t in targets if t["met"] is not None)
    bf = bf16_vs_fp32(cells)
    if bf:
        s["bf16_vs_fp32"] = bf
    return s


def run(cells: Sequence[Cell], cfg: RunConfig, on_cell: Optional[Callable[[int, int, dict], None]] = None) -> List[dict]:
    out: List[dict] = []
    t0 = time.monotonic()
    for i, cell in enumerate(cells):
        if cfg.budget_s is not None and time.monotonic() - t0 > cfg.budget_s:
            rec = cell.to_json()
            rec["error"] = f"skipped: time budget of {cfg.budget_s:.0f} s spent"
            rec["results"] = {}
        else:
            t1 = time.monotonic()
            try:
                rec = run_cell(cell, cfg)
            except Exception as exc:  # a bug here must not lose the other cells
                rec = cell.to_json()
                rec["results"] = {}
                rec["error"] = f"cell failed: {_err(exc)}"
                _release(cfg)
            rec["wall_s"] = time.monotonic() - t1
        out.append(rec)
        if on_cell is not None:
            on_cell(i, len(cells), rec)
    return out
