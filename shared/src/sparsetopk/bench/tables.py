"""Terminal lines (with progress) and the Markdown of BENCHMARKS.md, both from cell records."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Iterable, List, Optional

from .scenarios import SCENARIOS, by_scenario


def _us(x) -> str:
    if x is None:
        return "-"
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def _x(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _met(m) -> str:
    return "not measured" if m is None else ("yes" if m else "**no**")


def _pct(x) -> str:
    return "-" if x is None else f"{x:.0f}%"


def _order_names(names: Iterable[str], results: Dict[str, dict]) -> List[str]:
    names = list(dict.fromkeys(names))
    bk = sorted(n for n in names if results.get(n, {}).get("kind", "backend") == "backend")
    base = [n for n in names if n not in bk]
    base.sort(key=lambda n: (n != "torch.topk", n))
    return bk + base


# ---------------------------------------------------------------------------
# terminal


def cell_lines(i: int, n: int, rec: dict, elapsed: float) -> List[str]:
    head = f"[{i + 1:>3}/{n} {elapsed:6.0f}s] {rec['name']}"
    if rec.get("error"):
        return [f"{head}  -- {rec['error']}"]
    parts = [head]
    if rec.get("floor_us") is not None:
        parts.append(f"floor {_us(rec['floor_us'])} us")
    if rec.get("pick"):
        parts.append(f"pick={rec['pick']}")
    if rec.get("regret") is not None:
        parts.append(f"regret {rec['regret']:.3f}")
    lines = ["  ".join(parts)]
    res = rec.get("results", {})
    for name in _order_names(res, res):
        r = res[name]
        if r.get("error"):
            lines.append(f"      {name:22s} FAILED: {r['error']}")
            continue
        tags = []
        if name == rec.get("best"):
            tags.append("best")
        if name == rec.get("pick"):
            tags.append("pick")
        if r.get("check") and r["check"] != "ok":
            tags.append(r["check"])
        if r.get("graph_error"):
            tags.append(f"no graph: {r['graph_error'][:60]}")
        eager = r.get("us_eager")
        timer = r.get("timer", "")
        lines.append(
            f"      {name:22s} {_us(r.get('us')):>9} us  {('eager ' + _us(eager)) if eager is not None else '':>14}"
            f"  {_x(r.get('speedup_vs_torch')):>8} torch  {_pct(r.get('pct_bw')):>5} bw  [{timer}]"
            + (f"  <- {', '.join(tags)}" if tags else "")
        )
    for name, why in rec.get("skipped", {}).items():
        if not why.startswith("n/a"):
            lines.append(f"      {name:22s} skipped: {why}")
    return lines


def final_table(doc: dict) -> List[str]:
    """One row per cell: the best backend, torch.topk, the pick and its regret."""
    rows = [("cell", "best", "us", "torch us", "x torch", "% bw", "pick", "regret")]
    for c in doc.get("cells", []):
        if c.get("error"):
            rows.append((c["name"], "-", "-", "-", "-", "-", "-", "skipped" if "skipped" in c["error"] else "error"))
            continue
        res = c.get("results", {})
        best = res.get(c.get("best") or "", {})
        rows.append((
            c["name"], c.get("best") or "-", _us(best.get("us")), _us(res.get("torch.topk", {}).get("us")),
            _x(best.get("speedup_vs_torch")), _pct(best.get("pct_bw")), str(c.get("pick") or "-"),
            "-" if c.get("regret") is None else f"{c['regret']:.3f}" + (" FAILED" if c.get("pick_failed") else ""),
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = [""]
    for j, r in enumerate(rows):
        out.append("  ".join(v.ljust(widths[i]) if i in (0, 1, 6) else v.rjust(widths[i]) for i, v in enumerate(r)))
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def summary_lines(doc: dict) -> List[str]:
    s = doc.get("summary", {})
    m = doc.get("method", {})
    lines = [
        "",
        f"device: {doc['device'].get('name')}   timer: {m.get('timer')}   copy bandwidth: "
        + (f"{m['copy_bw_GBps']:.0f} GB/s (read+write)" if m.get("copy_bw_GBps") else "-"),
        f"cells: {s.get('cells')}  timed: {s.get('timed_cells')}  skipped: {s.get('skipped_cells')}  "
        f"backend errors: {s.get('backend_errors')}",
    ]
    if s.get("regret_geomean") is not None:
        lines.append(
            f"registry regret over {s['regret_cells']} cells: geometric mean {s['regret_geomean']:.3f}, "
            f"worst {s['regret_worst']:.3f} ({s.get('regret_worst_cell')})"
        )
    else:
        lines.append("registry regret: no cell had the pick timed")
    if s.get("pick_failed_cells"):
        lines.append(f"WARNING: the registry's pick FAILED in {s['pick_failed_cells']} cells (see the per-cell lines)")
    if s.get("pick_untimed_cells"):
        lines.append(f"the pick was not timed (filtered or skipped) in {s['pick_untimed_cells']} cells")
    if s.get("targets"):
        lines.append(f"issue-3 targets met: {s.get('targets_met')} of {s.get('targets_measured')} measured "
                     f"({len(s['targets'])} targets)")
        for t in s["targets"]:
            if t["met"] is None:
                lines.append(f"  --  {t['cell']}: {t['what']}; not measured")
                continue
            xf = "" if t.get("x_floor") is None else f", {t['x_floor']:.2f}x floor"
            lines.append(f"  {'ok ' if t['met'] else 'NO '} {t['cell']}: {t['what']}; best {t.get('best')} "
                         f"{_us(t.get('best_us'))} us{xf}")
    for note in m.get("notes", []):
        lines.append(f"note: {note}")
    return lines


# ---------------------------------------------------------------------------
# markdown


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|")


def render_markdown(doc: dict, plots: Optional[Dict[str, str]] = None, md_path=None, json_rel=None) -> str:
    """BENCHMARKS.md text. ``plots``: {"speedup-<scenario>" / "bandwidth": png path}."""
    plots = plots or {}
    base = Path(md_path).parent if md_path else None

    def rel(p):
        if base is None:
            return str(p)
        return os.path.relpath(str(p), str(base)).replace(os.sep, "/")

    dev = doc.get("device", {})
    v = doc.get("versions", {})
    m = doc.get("method", {})
    s = doc.get("summary", {})
    out: List[str] = []
    out.append("# sparsetopk benchmarks")
    out.append("")
    out.append("<!-- Generated by `sparsetopk bench --markdown` from the results JSON; do not edit by hand. -->")
    out.append("")
    out.append(f"- Date: {doc.get('created')}")
    devline = f"- Device: {dev.get('name')} ({dev.get('type')}"
    if dev.get("capability"):
        devline += f", sm {dev['capability']}, {dev.get('sms')} SMs, L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB"
    out.append(devline + ")")
    vb = ", ".join(f"{n} {x}" for n, x in v.get("backends", {}).items())
    out.append(
        f"- Versions: sparsetopk {v.get('sparsetopk')}, torch {v.get('torch')}"
        + (f" (CUDA {v['cuda']})" if v.get("cuda") else "")
        + (f" (HIP {v['hip']})" if v.get("hip") else "")
        + (f", triton {v['triton']}" if v.get("triton") else "")
        + (f", flashinfer {v['flashinfer']}" if v.get("flashinfer") else "")
        + (f", vllm {v['vllm']}" if v.get("vllm") else "")
        + f"; backends: {vb}"
    )
    out.append(f"- Command: `{doc.get('command')}`")
    if json_rel:
        out.append(f"- Raw results: [{json_rel}]({json_rel})")
    out.append("")
    out.append("## Method")
    out.append("")
    out.append(m.get("description", ""))
    if m.get("copy_bw_GBps"):
        out.append("")
        out.append(
            f"Measured device copy bandwidth: **{m['copy_bw_GBps']:.0f} GB/s** (bytes read + written). "
            "The floor of a cell is its bytes read (valid scores, per-row lengths/starts) plus bytes "
            "written (outputs) at that bandwidth; `% bw` = floor / time."
        )
    for note in m.get("notes", []):
        out.append("")
        out.append(f"> {note}")
    out.append("")
    out.append("## Summary")
    out.append("")
    if s.get("regret_geomean") is not None:
        out.append(
            f"Registry regret (pick's time / best backend's time) over {s['regret_cells']} cells: "
            f"geometric mean **{s['regret_geomean']:.3f}**, worst **{s['regret_worst']:.3f}** "
            f"(`{_md_escape(s.get('regret_worst_cell'))}`)."
        )
    else:
        out.append("Registry regret: no cell had the pick timed.")
    if s.get("regret_target_met") is not None:
        out.append(f"Target (geometric mean <= 1.05, worst <= 1.25): **{'met' if s['regret_target_met'] else 'NOT met'}**.")
    out.append("")
    out.append(f"Cells: {s.get('cells')}, timed: {s.get('timed_cells')}, skipped: {s.get('skipped_cells')}, "
               f"backend failures: {s.get('backend_errors')}, cells where the registry's pick failed: "
               f"{s.get('pick_failed_cells', 0)}.")
    if s.get("targets"):
        out.append("")
        out.append(f"### Performance targets (issue 3): {s.get('targets_met')} of {s.get('targets_measured')} "
                   f"measured met ({len(s['targets'])} targets)")
        out.append("")
        out.append("| cell | target | best backend | us | x floor | met |")
        out.append("|---|---|---|---|---|---|")
        for t in s["targets"]:
            xf = "-" if t.get("x_floor") is None else f"{t['x_floor']:.2f}"
            out.append(f"| {_md_escape(t['cell'])} | {_md_escape(t['what'])} | {t.get('best') or '-'} | "
                       f"{_us(t.get('best_us'))} | {xf} | {_met(t['met'])} |")
    if s.get("bf16_vs_fp32"):
        out.append("")
        out.append("### bf16 vs fp32, bytes per second of valid scores (best backend, N(0,1))")
        out.append("")
        out.append("| cell | fp32 GB/s | bf16 GB/s | bf16 >= fp32 |")
        out.append("|---|---|---|---|")
        for b in s["bf16_vs_fp32"]:
            out.append(f"| {_md_escape(b['cell'])} | {b['fp32_GBps']:.0f} ({b['fp32_best']}) | "
                       f"{b['bf16_GBps']:.0f} ({b['bf16_best']}) | {_met(b['met'])} |")
    if plots.get("bandwidth"):
        out.append("")
        out.append(f"![% of copy bandwidth vs width]({rel(plots['bandwidth'])})")
    groups = by_scenario(doc.get("cells", []))
    order = [x for x in SCENARIOS if x in groups] + [x for x in groups if x not in SCENARIOS]
    for scen in order:
        cells = groups[scen]
        out.append("")
        out.append(f"## {scen}")
        out.append("")
        if plots.get(f"speedup-{scen}"):
            out.append(f"![speedup over torch.topk: {scen}]({rel(plots[f'speedup-{scen}'])})")
            out.append("")
        names: List[str] = []
        allres: Dict[str, dict] = {}
        for c in cells:
            for n, r in c.get("results", {}).items():
                names.append(n)
                allres.setdefault(n, r)
        names = _order_names(names, allres)
        if any(r.get("us_eager") is not None for c in cells for r in c.get("results", {}).values()):
            out.append("Times are CUDA-graph µs per call; `eN` is the eager time (launched from Python) "
                       "of the same call; `(Nx)` the speedup over torch.topk; bold: the best backend.")
            out.append("")
        head = ["cell", "op", "k", "order", "dtype", "dist", "floor us"] + [f"{n} us" for n in names] + [
            "best % bw", "pick", "regret"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---"] * len(head)) + "|")
        for c in cells:
            res = c.get("results", {})
            row = [_md_escape(c["label"] + (f" R={c['shards']}" if c.get("op") == "merge" else "")),
                   c["op"], str(c["k"]), c["order"], c["dtype"], c["dist"], _us(c.get("floor_us"))]
            if c.get("error"):
                row += ["-"] * len(names) + ["-", "-", "-"]
                out.append("| " + " | ".join(row) + " |")
                continue
            for n in names:
                r = res.get(n)
                if r is None:
                    row.append("n/a")
                elif r.get("error"):
                    row.append("FAILED")
                else:
                    cell_txt = _us(r.get("us"))
                    if n == c.get("best"):
                        cell_txt = f"**{cell_txt}**"
                    if r.get("kind") == "backend" and r.get("speedup_vs_torch"):
                        cell_txt += f" ({r['speedup_vs_torch']:.2f}x)"
                    if r.get("us_graph") is not None and r.get("us_eager") is not None:
                        cell_txt += f" e{_us(r['us_eager'])}"
                    elif r.get("graph_error"):
                        cell_txt += " (eager: no graph)"
                    if r.get("check") and r["check"] != "ok":
                        cell_txt += f" {r['check']}"
                    row.append(cell_txt)
            best = res.get(c.get("best") or "", {})
            row.append(_pct(best.get("pct_bw")))
            row.append(str(c.get("pick") or "-"))
            row.append("pick FAILED" if c.get("pick_failed") else ("-" if c.get("regret") is None else f"{c['regret']:.2f}"))
            out.append("| " + " | ".join(row) + " |")
    # errors and skips, so nothing fails silently
    problems = []
    for c in doc.get("cells", []):
        if c.get("error"):
            problems.append(f"- `{_md_escape(c['name'])}`: {c['error']}")
        for n, r in c.get("results", {}).items():
            if r.get("error"):
                problems.append(f"- `{_md_escape(c['name'])}` / {n}: {r['error']}")
            elif r.get("graph_error"):
                problems.append(f"- `{_md_escape(c['name'])}` / {n}: not graph-capturable ({r['graph_error']}); eager time shown")
    if problems:
        out.append("")
        out.append("## Failures and skips")
        out.append("")
        out.extend(problems)
    out.append("")
    return "\n".join(out)
