"""Tuning tables: measured per-shape timings the registry reads (SPEC §5).

Format (JSON, ``format_version`` 1)::

    {"format": "sparsetopk-tuning", "format_version": 1,
     "device": "NVIDIA H200", "created": "2026-11-29T12:00:00Z",
     "command": "sparsetopk tune ...", "versions": {"torch": "...", ...},
     "entries": {"<bucket key>": {"<backend>": {"us": 3.1, "version": "0.1.0", "cells": 2}}}}

(``cells``, the number of benchmark cells a time summarises, and any other
extra keys are informative; readers need only ``us`` and ``version``.)

A bucket key is ``op|dtype|k<kb>|r<rb>|w<wb>`` (optionally ``|o<order>``),
each of k, rows and width rounded up to a power of two (its log2), so nearby
shapes share a measurement. A timing whose recorded backend version differs from the
installed one is stale and ignored (a miss). Files that fail to parse, or
carry another format version, are ignored: never a crash.

Locations, first hit wins per backend: the user cache
(``$SPARSETOPK_CACHE_DIR`` or ``$XDG_CACHE_HOME/sparsetopk`` or
``~/.cache/sparsetopk``)/``tuning-v1.json``, then the tables shipped in
``sparsetopk/tuning/*.json`` (measured by the project; each names its device
and is named for it: ``<device_slug(device)>.json``).

``sparsetopk tune`` (:mod:`sparsetopk.bench`) writes these files; the registry
reads them through :func:`tables_for_device`. See docs/benchmarks.md.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
from importlib import resources
from pathlib import Path
from typing import Dict, List, Optional

import torch

FORMAT = "sparsetopk-tuning"
FORMAT_VERSION = 1
FILE_NAME = f"tuning-v{FORMAT_VERSION}.json"


def cache_dir() -> Path:
    env = os.environ.get("SPARSETOPK_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "sparsetopk"


def cache_path() -> Path:
    return cache_dir() / FILE_NAME


def device_slug(device_name: str) -> str:
    """File-name form of a device name: "NVIDIA H200" -> "nvidia-h200" (shipped tables are
    ``sparsetopk/tuning/<slug>.json``)."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or "device"


def shipped_dir() -> Path:
    """Folder of the shipped tables in a source checkout / editable install."""
    return Path(__file__).resolve().parent / "tuning"


def _log2_bucket(x: int) -> int:
    return 0 if x <= 1 else int(math.ceil(math.log2(x)))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def bucket_key(op: str, dtype, k: int, rows: int, width: int, order: Optional[str] = None) -> str:
    """Shape bucket; with ``order`` the key is specific to it (``|o<order>``),
    since sorting k results can cost as much as selecting them. The registry
    looks for the order-specific key first, then the order-free one."""
    if isinstance(dtype, torch.dtype):
        dtype = dtype_name(dtype)
    key = f"{op}|{dtype}|k{_log2_bucket(k)}|r{_log2_bucket(rows)}|w{_log2_bucket(width)}"
    return f"{key}|o{order}" if order else key


@dataclasses.dataclass
class TuningTable:
    device: str
    entries: Dict[str, Dict[str, dict]] = dataclasses.field(default_factory=dict)
    meta: dict = dataclasses.field(default_factory=dict)
    source: str = ""

    def timings(self, key: str, versions: Dict[str, str]) -> Dict[str, float]:
        """Fresh timings (µs) for a bucket: backends whose version matches."""
        out = {}
        bucket = self.entries.get(key)
        if not isinstance(bucket, dict):
            return out
        for name, rec in bucket.items():
            try:
                us = float(rec["us"])
            except (KeyError, TypeError, ValueError):
                continue
            if name in versions and rec.get("version") == versions[name] and math.isfinite(us):
                out[name] = us
        return out

    def to_json(self) -> dict:
        d = {"format": FORMAT, "format_version": FORMAT_VERSION, "device": self.device}
        d.update(self.meta)
        d["entries"] = self.entries
        return d


def load_table(path) -> Optional[TuningTable]:
    """Parse a tuning file; None if missing, unreadable or of another format."""
    try:
        with open(path, encoding="utf-8") as f:
            d = json.load(f)
        if d.get("format") != FORMAT or d.get("format_version") != FORMAT_VERSION:
            return None
        entries = d.get("entries")
        if not isinstance(entries, dict) or not isinstance(d.get("device"), str):
            return None
        meta = {k: v for k, v in d.items() if k not in ("format", "format_version", "device", "entries")}
        return TuningTable(device=d["device"], entries=entries, meta=meta, source=str(path))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def write_json_atomic(doc: dict, path, **dump_kw) -> Path:
    """Write JSON through a temp file in the same folder, then rename: a
    reader sees the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=".json", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, **dump_kw)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def save_table(table: TuningTable, path=None) -> Path:
    """Write atomically (temp file in the same folder, then rename)."""
    return write_json_atomic(table.to_json(), Path(path) if path is not None else cache_path(), sort_keys=True)


def shipped_tables() -> List[TuningTable]:
    tables = []
    try:
        folder = resources.files("sparsetopk") / "tuning"
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".json"):
                t = load_table(entry)
                if t is not None:
                    tables.append(t)
    except (OSError, ModuleNotFoundError, FileNotFoundError):
        pass
    return tables


def tables_for_device(device_name: str) -> List[TuningTable]:
    """User cache first, then shipped defaults; only tables for this device."""
    tables = []
    user = load_table(cache_path())
    if user is not None:
        tables.append(user)
    tables.extend(shipped_tables())
    return [t for t in tables if t.device == device_name]
