"""From timed cells to a tuning table (format v1, see :mod:`sparsetopk.tuning`).

Cells are grouped by the registry's bucket key (op, dtype, k, rows, width,
each rounded up to a power of two, and order). Per bucket and backend the table holds
the geometric mean of the backend's per-call times over the bucket's cells
(geometric, so one large cell does not drown the others). A backend that
failed or did not serve some cell of a bucket that another backend timed is
left out of that bucket: a time over an easier subset would flatter it.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional

from .. import tuning


def bucket_of(cell: dict) -> str:
    dtype = "float32" if cell["op"] == "merge" else cell["dtype"]
    return tuning.bucket_key(cell["op"], dtype, int(cell["k"]), int(cell["rows"]), int(cell["width"]), cell.get("order"))


def table_entries(cells: List[dict]) -> Dict[str, Dict[str, dict]]:
    buckets: Dict[str, List[dict]] = {}
    for c in cells:
        if c.get("error") or not c.get("results"):
            continue
        buckets.setdefault(bucket_of(c), []).append(c)
    entries: Dict[str, Dict[str, dict]] = {}
    for key, cs in sorted(buckets.items()):
        timed_cells = []
        per: Dict[str, List[float]] = {}
        versions: Dict[str, str] = {}
        for c in cs:
            got = {n: r for n, r in c["results"].items()
                   if r.get("kind") == "backend" and r.get("us") and not r.get("error")}
            if not got:
                continue
            timed_cells.append(c)
            for n, r in got.items():
                per.setdefault(n, []).append(float(r["us"]))
                versions[n] = str(r.get("version", ""))
        rec = {}
        for n, ts in per.items():
            if len(ts) != len(timed_cells):
                continue
            g = math.exp(sum(math.log(t) for t in ts) / len(ts))
            rec[n] = {"us": round(g, 4), "version": versions[n], "cells": len(ts)}
        if rec:
            entries[key] = rec
    return entries


def build_table(device_name: str, cells: List[dict], meta: dict, existing: Optional[tuning.TuningTable] = None,
                ) -> tuning.TuningTable:
    """A table for ``device_name``; buckets measured now replace the same buckets of ``existing``."""
    entries: Dict[str, Dict[str, dict]] = {}
    if existing is not None and existing.device == device_name:
        entries.update(existing.entries)
    new = table_entries(cells)
    entries.update(new)
    m = dict(meta)
    m["buckets_measured"] = len(new)
    return tuning.TuningTable(device=device_name, entries=entries, meta=m)
