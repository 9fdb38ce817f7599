"""``sparsetopk bench`` and ``sparsetopk tune``: argument parsing and the two flows."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import List, Optional

import torch

from . import report
from .scenarios import DISTS, DTYPES, SCENARIOS, full_grid, quick_grid, select_cells

METHOD_CUDA = (
    "Each cell is a serving-shaped call (real row geometry: per-row lengths, starts, shard views). "
    "Per backend: the call is warmed up on every input view, then `calls` back-to-back calls, cycling "
    "through rotating input views whose valid bytes together exceed {rot:.1f}x the L2 size "
    "({l2:.0f} MiB), are captured in one CUDA graph; the graph is replayed and each replay timed with "
    "CUDA events; the time per call is the median replay time / calls. Eager time (the same calls "
    "launched from Python, timed with events) is also recorded in the JSON. torch.topk (and FlashInfer / "
    "vLLM kernels when importable) run the dense version of the cell in the same run. The registry's "
    "pick is `sparsetopk.registry.select(call)`; regret = pick's time / best backend's time. "
    "Backends that launch with programmatic dependent launch (nvidia-sm100 on sm_90+) overlap each "
    "call's launch with the previous call's tail in the graph, as they would after a producer kernel "
    "that triggers its dependents early; torch.topk and the peers do not."
)
METHOD_CPU = (
    "CPU run: each backend's call is timed with a wall clock (time.perf_counter), median of {rep} calls "
    "after one warm-up call; no CUDA graphs, no rotating buffers. Numbers say that the code runs, not "
    "how fast a GPU serves."
)


def _split(values: Optional[List[str]]) -> Optional[List[str]]:
    if not values:
        return None
    out = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return out or None


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="a tiny grid (seconds on a CPU)")
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help=f"only these scenarios (repeatable or comma list): {', '.join(SCENARIOS)}")
    p.add_argument("--backend", action="append", metavar="NAME",
                   help="only these sparsetopk backends (repeatable or comma list); the registry's pick is "
                        "still computed over all of them")
    p.add_argument("--dtype", action="append", metavar="DTYPE", help=f"only these score dtypes: {', '.join(DTYPES)}")
    p.add_argument("--dist", action="append", metavar="DIST", help=f"only these distributions: {', '.join(DISTS)}")
    p.add_argument("--op", action="append", metavar="OP", help="only these ops: topk, merge")
    p.add_argument("--k", action="append", metavar="K", help="only cells with these k (e.g. --k 32,64)")
    p.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="stop starting new cells after this many seconds (cells run in priority order)")
    p.add_argument("--include-interpreted", action="store_true",
                   help="also time Triton-interpreter backends on the CPU (slow; skipped by default)")
    p.add_argument("--max-gib", type=float, default=None,
                   help="largest input allocation per cell in GiB (default: 8 on a GPU, 0.5 on the CPU)")
    p.add_argument("--target-s", type=float, default=0.15,
                   help="device seconds of timed replays per backend and timer (default 0.15)")
    p.add_argument("--repeats", type=int, default=5, help="timed calls per backend on the CPU (default 5)")
    p.add_argument("--rotate", type=float, default=2.5,
                   help="one pass over the rotating views reads more than this many L2 sizes (default 2.5)")
    p.add_argument("--quiet", action="store_true", help="no per-cell lines")


def _device(args) -> torch.device:
    if args.device:
        return torch.device(args.device)
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _cells(args):
    cells = quick_grid() if args.quick else full_grid()
    scen = _split(args.scenario)
    if scen:
        bad = [s for s in scen if s not in SCENARIOS]
        if bad:
            raise SystemExit(f"--scenario: unknown {', '.join(bad)}; known: {', '.join(SCENARIOS)}")
    dts = _split(args.dtype)
    if dts:
        alias = {"fp32": "float32", "f32": "float32", "bf16": "bfloat16", "fp16": "float16", "f16": "float16",
                 "half": "float16"}
        dts = [alias.get(d, d) for d in dts]
        bad = [d for d in dts if d not in ("float32", "bfloat16", "float16")]
        if bad:
            raise SystemExit(f"--dtype: unknown {', '.join(bad)}; known: float32, bfloat16, float16")
    dists = _split(args.dist)
    if dists:
        bad = [d for d in dists if d not in DISTS]
        if bad:
            raise SystemExit(f"--dist: unknown {', '.join(bad)}; known: {', '.join(DISTS)}")
    ops = _split(args.op)
    ks = _split(args.k)
    if ks:
        try:
            keep = {int(k) for k in ks}
        except ValueError:
            raise SystemExit(f"--k: not integers: {', '.join(ks)}") from None
        cells = [c for c in cells if c.k in keep]
    out = select_cells(cells, scen, dts, dists, ops)
    if dts and "float16" in dts:  # the grids hold fp32/bf16; fp16 on request: bf16 cells re-typed
        import dataclasses

        extra = [dataclasses.replace(c, dtype="float16") for c in select_cells(cells, scen, ["bfloat16"], dists, ops)
                 if c.op == "topk"]
        out = select_cells(out + extra)
    return out


def _config(args, device, baselines: bool, check: bool = False):
    from .runner import RunConfig
    from .timing import copy_bandwidth

    max_gib = args.max_gib if args.max_gib is not None else (8.0 if device.type == "cuda" else 0.5)
    l2 = report.l2_bytes(device)
    bw = copy_bandwidth(device)
    cfg = RunConfig(
        device=device,
        backends=_split(args.backend),
        include_interpreted=args.include_interpreted,
        baselines=baselines,
        l2_bytes=l2,
        copy_bw=bw["bytes_per_s"],
        rotate_factor=args.rotate,
        max_alloc=int(max_gib * 2**30),
        target_s=args.target_s,
        cpu_repeats=max(1, args.repeats),
        budget_s=args.budget,
        check=check,
        eager=not getattr(args, "no_eager", False),
        baseline_names=_split(getattr(args, "baseline", None)),
    )
    return cfg, bw


def _method(device, cfg, bw) -> dict:
    m = {
        "timer": "cuda-graph" if device.type == "cuda" else "wall",
        "l2_bytes": cfg.l2_bytes,
        "rotate_factor": cfg.rotate_factor,
        "target_s": cfg.target_s,
        "copy_bw_GBps": bw["bytes_per_s"] / 1e9 if math.isfinite(bw["bytes_per_s"]) else None,
        "copy_bytes": bw["bytes"],
        "notes": [],
    }
    if device.type == "cuda":
        m["description"] = METHOD_CUDA.format(rot=cfg.rotate_factor, l2=cfg.l2_bytes / 2**20)
    else:
        m["description"] = METHOD_CPU.format(rep=cfg.cpu_repeats)
        m["notes"].append(f"CPU-only run: wall-clock median of {cfg.cpu_repeats} calls per backend, no CUDA graphs.")
        if not cfg.include_interpreted:
            m["notes"].append("Triton-interpreter backends are skipped on the CPU (--include-interpreted to time them).")
    if os.environ.get("SPARSETOPK_BACKEND"):
        m["notes"].append(f"SPARSETOPK_BACKEND={os.environ['SPARSETOPK_BACKEND']} was set: it forces the registry's pick.")
    return m


def _printer(quiet: bool):
    from .tables import cell_lines

    t0 = time.monotonic()

    def on_cell(i, n, rec):
        if quiet:
            print(f"\r[{i + 1}/{n}]", end="", file=sys.stderr, flush=True)
            if i + 1 == n:
                print(file=sys.stderr)
            return
        for line in cell_lines(i, n, rec, time.monotonic() - t0):
            print(line, flush=True)

    return on_cell


# ---------------------------------------------------------------------------
# bench


def bench_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sparsetopk bench",
        description="Time every sparsetopk backend that serves each cell beside torch.topk, over serving-shaped "
                    "scenarios; report speedups, % of copy bandwidth, and the registry's pick and regret.")
    _common(p)
    p.add_argument("--json", metavar="PATH", help="write the results JSON here (rewritten after every cell)")
    p.add_argument("--plots", metavar="DIR", help="write PNG plots here (needs matplotlib)")
    p.add_argument("--markdown", metavar="PATH", help="write the results as Markdown (BENCHMARKS.md) here")
    p.add_argument("--render", metavar="JSON",
                   help="run nothing: render --markdown / --plots from an existing results JSON")
    p.add_argument("--no-baselines", action="store_true", help="do not time torch.topk / FlashInfer / vLLM")
    p.add_argument("--baseline", action="append", metavar="NAME",
                   help="only these baselines (repeatable or comma list): torch.topk, flashinfer.top_k, "
                        "vllm.top_k_per_row (default: every installed one)")
    p.add_argument("--no-eager", action="store_true", help="CUDA: graph timing only")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="a line for the method notes of the JSON / Markdown (e.g. how the run was produced)")
    p.add_argument("--check", action="store_true",
                   help="also compare every backend's answer (first view) with the reference backend's")
    return p


def _outputs(doc: dict, args) -> int:
    plots = {}
    if args.plots:
        why = __import__("sparsetopk.bench.plots", fromlist=["available"]).available()
        if why:
            print(f"plots skipped: {why}", file=sys.stderr)
        else:
            from .plots import write_plots

            plots = write_plots(doc, args.plots)
            for pth in plots.values():
                print(f"wrote {pth}")
    if args.markdown:
        from .tables import render_markdown

        json_rel = None
        if getattr(args, "json", None) or getattr(args, "render", None):
            src = args.json or args.render
            json_rel = os.path.relpath(os.path.abspath(src), os.path.dirname(os.path.abspath(args.markdown)))
            json_rel = json_rel.replace(os.sep, "/")
        text = render_markdown(doc, plots, md_path=args.markdown, json_rel=json_rel)
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(str(args.markdown) + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, args.markdown)
        print(f"wrote {args.markdown}")
    return 0


def _without_notes(argv: List[str]) -> List[str]:
    """The command line minus --note TEXT (the notes are printed on their own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--note":
            skip = True
            continue
        if a.startswith("--note="):
            continue
        out.append(a)
    return out


def bench_main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = bench_parser().parse_args(argv)
    if args.render:
        doc = report.load_json(args.render)
        if not (args.markdown or args.plots):
            from .tables import final_table, summary_lines

            print("\n".join(final_table(doc) + summary_lines(doc)))
            return 0
        return _outputs(doc, args)
    from .runner import run, summarize
    from .tables import final_table, summary_lines

    device = _device(args)
    cells = _cells(args)
    if not cells:
        print("no cells match the filters", file=sys.stderr)
        return 2
    cfg, bw = _config(args, device, baselines=not args.no_baselines, check=args.check)
    doc = {
        "format": report.FORMAT,
        "format_version": report.FORMAT_VERSION,
        "created": report.now_iso(),
        "command": report.command_line("sparsetopk bench", _without_notes(argv)),
        "argv": argv,
        "grid": "quick" if args.quick else "full",
        "device": report.device_info(device),
        "host": report.host_info(),
        "versions": report.versions(),
        "method": _method(device, cfg, bw),
        "cells": [],
        "summary": {},
    }
    doc["method"]["notes"].extend(args.note)
    print(f"sparsetopk bench: {len(cells)} cells on {doc['device']['name']} ({device}); timer "
          f"{doc['method']['timer']}; copy bandwidth {bw['bytes_per_s'] / 1e9:.0f} GB/s"
          + (f"; budget {args.budget:.0f} s" if args.budget else ""), flush=True)
    for note in doc["method"]["notes"]:
        print(f"note: {note}", flush=True)
    printer = _printer(args.quiet)

    def on_cell(i, n, rec):
        doc["cells"].append(report.sanitize(rec))
        printer(i, n, rec)
        if args.json:
            doc["summary"] = summarize(doc["cells"])
            report.write_json(doc, args.json)

    run(cells, cfg, on_cell)
    doc["summary"] = summarize(doc["cells"])
    doc["finished"] = report.now_iso()
    doc = report.sanitize(doc)
    if args.json:
        report.write_json(doc, args.json)
        print(f"wrote {args.json}")
    print("\n".join(final_table(doc)))
    print("\n".join(summary_lines(doc)))
    return _outputs(doc, args)


# ---------------------------------------------------------------------------
# tune


def tune_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sparsetopk tune",
        description="Time every serving backend over the grid on this device and write the tuning table the "
                    "registry reads (default: the user cache, sparsetopk.tuning.cache_path()).")
    _common(p)
    p.add_argument("--output", metavar="PATH",
                   help="write the table here instead of the user cache (e.g. the shipped defaults "
                        "shared/src/sparsetopk/tuning/<device-slug>.json)")
    p.add_argument("--from-json", metavar="JSON",
                   help="time nothing: build the table from a `sparsetopk bench --json` results file")
    p.add_argument("--json", metavar="PATH", help="also write the raw timings (bench JSON format) here")
    p.add_argument("--fresh", action="store_true",
                   help="do not keep buckets of an existing table at the output path")
    return p


def tune_main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = tune_parser().parse_args(argv)
    from .. import registry, tuning
    from .tune import build_table

    out_path = Path(args.output) if args.output else tuning.cache_path()
    command = report.command_line("sparsetopk tune", argv)

    def existing_for(device_name):
        existing = None if args.fresh else tuning.load_table(out_path)
        if existing is not None and existing.device != device_name:
            print(f"note: {out_path} held a table for {existing.device!r}; replacing it with one for {device_name!r}")
            existing = None
        return existing

    if args.from_json:
        doc = report.load_json(args.from_json)
        device_name = doc["device"]["name"]
        cells = doc["cells"]
        meta = {"created": report.now_iso(), "command": command, "source": f"{args.from_json} ({doc.get('command')})",
                "measured": doc.get("created"), "versions": doc.get("versions", {}),
                "timer": doc.get("method", {}).get("timer"), "grid": doc.get("grid")}
        table = build_table(device_name, cells, meta, existing_for(device_name))
    else:
        from .runner import run, summarize

        device = _device(args)
        cells_sel = _cells(args)
        if not cells_sel:
            print("no cells match the filters", file=sys.stderr)
            return 2
        cfg, bw = _config(args, device, baselines=False)
        device_name = registry.device_name(device)
        existing = existing_for(device_name)
        print(f"sparsetopk tune: {len(cells_sel)} cells on {device_name} ({device})"
              + (f"; budget {args.budget:.0f} s" if args.budget else ""), flush=True)
        cells = []
        printer = _printer(args.quiet)
        meta = {"created": report.now_iso(), "command": command, "versions": report.versions(),
                "timer": "cuda-graph" if device.type == "cuda" else "wall", "grid": "quick" if args.quick else "full",
                "device_info": report.device_info(device)}
        raw = {"format": report.FORMAT, "format_version": report.FORMAT_VERSION, "created": meta["created"],
               "command": command, "argv": argv, "grid": meta["grid"], "device": meta["device_info"],
               "host": report.host_info(), "versions": meta["versions"], "method": _method(device, cfg, bw),
               "cells": cells, "summary": {}}
        table = None

        def on_cell(i, n, rec):
            nonlocal table
            cells.append(report.sanitize(rec))
            printer(i, n, rec)
            # written after every cell: a run that is killed keeps what it measured
            t = build_table(device_name, cells, dict(meta, partial=i + 1 < n), existing)
            if t.entries:
                table = t
                tuning.save_table(table, out_path)
            if args.json:
                raw["summary"] = summarize(cells)
                report.write_json(report.sanitize(raw), args.json)

        run(cells_sel, cfg, on_cell)
        if args.json:
            print(f"wrote {args.json}")
        if table is None:
            table = build_table(device_name, cells, meta, existing)
    if not table.entries:
        print("no backend timing to write (every cell failed or was skipped)", file=sys.stderr)
        return 1
    table.meta.pop("partial", None)
    tuning.save_table(table, out_path)
    registry.reset()  # the next selection reads the new table
    print(f"wrote {out_path}: {len(table.entries)} buckets ({table.meta.get('buckets_measured')} measured now) "
          f"for {device_name}")
    return 0
