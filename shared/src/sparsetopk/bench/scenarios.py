"""Benchmark cells: serving-shaped top-k and merge calls, grouped in scenarios.

A :class:`Cell` is plain data (it goes into the JSON as is). Its row geometry
(per-row ``starts`` / ``lengths``) is drawn on the host from a seed derived
from the cell's name, so every run and every backend sees the same rows.

Scenarios (``--scenario`` takes these names, comma-separated):

- ``anchor``: the issue-3 target cells. k=16 rank over full rows (64x1344,
  512x1344, 4096x4096, 16384x8192); k=2048 over a 1M-column buffer (row
  stride 1M) with per-row lengths 4x40K, 4x150K, 16x1M, 64x1M in orders
  any, rank and index.
- ``decode``: small-k decode, rows 64..16384 x widths 672..8192, k=16, rank,
  per-row lengths uniform in [width/2, width]; and k=32, 64, 128, 160 and 224
  on 512x1344, 4096x4096, 16384x8192.
- ``dsa-decode``: DeepSeek sparse attention decode, k=2048, order any, a
  1M-column buffer, 1..32 requests of 1 + MTP rows, request contexts
  log-uniform in [40K, 1M] (row t of a request sees ``ctx - mtp + t``).
- ``prefill``: ragged prefill, 4096 query rows, k=2048, any: one 128K
  sequence's last chunk (causal lengths), and packed sequences with
  ``starts`` (128K columns in all).
- ``icp``: context-parallel shards: one shard's ``topk`` with
  ``index_scale=R, index_offset=R-1`` (global lengths), and the ``merge`` of
  R shard lists, R in {2, 4, 8}, for k=16 and k=2048.

Every scenario runs in float32 and bfloat16 and on two score distributions:
``normal`` (N(0,1)) and ``band`` (max over blocks of 64 N(0,1) draws, like
max-pooled block logits: a narrow band where many scores sit near the
threshold; in bf16 it is full of exact ties).
"""

from __future__ import annotations

import dataclasses
import math
import zlib
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

K1 = 1024
M1 = 1 << 20

SCENARIOS = ("anchor", "decode", "dsa-decode", "prefill", "icp")
DTYPES = ("float32", "bfloat16")
DISTS = ("normal", "band")


@dataclasses.dataclass(frozen=True)
class Cell:
    scenario: str
    label: str  # human label of the shape, e.g. "64x1344"
    op: str  # "topk" or "merge"
    dtype: str  # score dtype name (topk); merge values are always float32
    dist: str  # "normal" or "band"
    rows: int
    width: int  # buffer columns (scores.shape[1]); for merge: R * k_in
    k: int
    order: str = "rank"
    # Row geometry, drawn by geometry(): ("full",), ("fixed", n),
    # ("uniform", lo, hi), ("causal", seq_len), ("packed", (seq lens...)),
    # ("dsa", mtp, lo, hi), ("list", (n0, n1, ...))
    lengths: Tuple = ("full",)
    index_scale: int = 1
    index_offset: int = 0
    shards: int = 0  # merge: R lists
    k_in: int = 0  # merge: length of each list
    priority: int = 5  # lower runs first (under a time budget)
    # issue-3 performance targets (fp32 N(0,1) cells only): time, or a multiple of the bytes floor
    target_us: Optional[float] = None
    target_floor_x: Optional[float] = None

    @property
    def name(self) -> str:
        extra = ""
        if self.op == "topk" and self.index_scale > 1:
            extra = f" shard{self.index_offset}/{self.index_scale}"
        if self.op == "merge":
            extra = f" R={self.shards}"
        return f"{self.scenario}:{self.op} {self.label}{extra} k={self.k} {self.order} {self.dtype} {self.dist}"

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        d["name"] = self.name
        d["lengths"] = list(_jsonable(self.lengths))
        return d

    def seed(self) -> int:
        # the geometry is shared across dtypes/dists/orders of the same shape
        base = f"{self.scenario}|{self.op}|{self.label}|{self.rows}|{self.width}|{self.lengths}|{self.index_scale}"
        return zlib.crc32(base.encode())


def _jsonable(x):
    if isinstance(x, tuple):
        return [_jsonable(v) for v in x]
    return x


@dataclasses.dataclass
class Geometry:
    """Host-side per-row layout of a topk cell (numpy int64 arrays or None)."""

    starts: Optional[np.ndarray]  # buffer column where row r begins, or None
    lengths: Optional[np.ndarray]  # global length per row, or None (full rows)
    valid_cols: np.ndarray  # buffer columns actually valid per row
    extent: int  # max over rows of (start + valid buffer columns)

    def describe(self) -> dict:
        v = self.valid_cols
        d = {
            "valid_cols_min": int(v.min()) if v.size else 0,
            "valid_cols_max": int(v.max()) if v.size else 0,
            "valid_cols_mean": float(v.mean()) if v.size else 0.0,
            "extent": int(self.extent),
            "has_starts": self.starts is not None,
            "has_lengths": self.lengths is not None,
        }
        return d


def geometry(cell: Cell) -> Geometry:
    """Per-row starts/lengths of a topk cell, deterministic from its seed."""
    rng = np.random.default_rng(cell.seed())
    rows, width, scale, off = cell.rows, cell.width, cell.index_scale, cell.index_offset
    kind = cell.lengths[0]
    starts = None
    if kind == "full":
        lengths = None
    elif kind == "fixed":
        lengths = np.full(rows, int(cell.lengths[1]), dtype=np.int64)
    elif kind == "uniform":
        lo, hi = int(cell.lengths[1]), int(cell.lengths[2])
        lengths = rng.integers(lo, hi + 1, size=rows, dtype=np.int64)
    elif kind == "list":
        vals = np.asarray(cell.lengths[1], dtype=np.int64)
        lengths = np.resize(vals, rows)
    elif kind == "causal":  # the last `rows` positions of one sequence
        seq = int(cell.lengths[1])
        lengths = seq - rows + 1 + np.arange(rows, dtype=np.int64)
    elif kind == "packed":  # several sequences side by side; rows split in proportion
        seqs = [int(s) for s in cell.lengths[1]]
        total = sum(seqs)
        q = [max(1, rows * s // total) for s in seqs]
        q[-1] = rows - sum(q[:-1])
        st, ln, off_kv = [], [], 0
        for s, qs in zip(seqs, q, strict=False):
            st.extend([off_kv] * qs)
            ln.extend(s - qs + 1 + np.arange(qs))
            off_kv += s
        starts = np.asarray(st, dtype=np.int64)
        lengths = np.asarray(ln, dtype=np.int64)
    elif kind == "dsa":  # requests of 1 + mtp rows; context log-uniform in [lo, hi]
        mtp, lo, hi = int(cell.lengths[1]), int(cell.lengths[2]), int(cell.lengths[3])
        per = 1 + mtp
        nreq = max(1, rows // per)
        ctx = np.exp(rng.uniform(math.log(lo), math.log(hi), size=nreq)).astype(np.int64)
        ctx = np.minimum(ctx, hi)
        lengths = np.concatenate([c - mtp + np.arange(per) for c in ctx])[:rows]
        if lengths.size < rows:
            lengths = np.resize(lengths, rows)
    else:  # pragma: no cover - a typo in a grid
        raise ValueError(f"unknown lengths kind {kind!r}")
    s = np.zeros(rows, dtype=np.int64) if starts is None else np.clip(starts, 0, width)
    w_r = width - s
    glen = w_r * scale if lengths is None else np.clip(lengths, 0, w_r * scale)
    # buffer column j is valid iff j < W_r and j*scale + off < L_r
    valid = np.clip((glen - off + scale - 1) // scale, 0, w_r)
    extent = int((s + valid).max()) if rows else 0
    return Geometry(starts=starts, lengths=lengths, valid_cols=valid, extent=max(extent, 1))


# ---------------------------------------------------------------------------
# grids


def _both(cells: List[Cell], dtypes=DTYPES, dists=DISTS) -> List[Cell]:
    out = []
    for c in cells:
        for dt in dtypes:
            for ds in dists:
                bump = (dt != "float32") + 2 * (ds != "normal")  # breadth first under a budget
                kw = {} if (dt, ds) == ("float32", "normal") else {"target_us": None, "target_floor_x": None}
                out.append(dataclasses.replace(c, dtype=dt, dist=ds, priority=c.priority + bump, **kw))
    return out


# issue 3, on the H200: fp32 N(0,1), CUDA-graph replay, median
TARGETS_US = {
    ("64x1344", 16, "rank"): 3.0,
    ("512x1344", 16, "rank"): 5.0,
    ("4096x4096", 16, "rank"): 22.0,
    ("16384x8192", 16, "rank"): 165.0,
    ("4x40K/1M", 2048, "any"): 10.0,
    ("4x150K/1M", 2048, "any"): 12.0,
    ("16x1M/1M", 2048, "any"): 30.0,
    ("64x1M/1M", 2048, "any"): 90.0,
}
PREFILL_FLOOR_X = 1.6  # prefill within 1.6x of the bytes-read floor


def _topk(scenario, label, rows, width, k, order="rank", lengths=("full",), priority=5, **kw) -> Cell:
    return Cell(scenario, label, "topk", "float32", "normal", rows, width, k, order, lengths, priority=priority, **kw)


def _merge(scenario, label, rows, shards, k_in, k, order="rank", priority=5) -> Cell:
    return Cell(scenario, label, "merge", "float32", "normal", rows, shards * k_in, k, order,
                shards=shards, k_in=k_in, priority=priority)


def _kfmt(n: int) -> str:
    if n % M1 == 0:
        return f"{n // M1}M"
    if n % K1 == 0:
        return f"{n // K1}K"
    return str(n)


def full_grid() -> List[Cell]:
    cells: List[Cell] = []
    # anchors (issue 3)
    anchors = []
    for rows, width in ((64, 1344), (512, 1344), (4096, 4096), (16384, 8192)):
        label = f"{rows}x{width}"
        anchors.append(_topk("anchor", label, rows, width, 16, "rank", priority=0,
                             target_us=TARGETS_US.get((label, 16, "rank"))))
    for rows, n in ((4, 40 * K1), (4, 150 * K1), (16, M1), (64, M1)):
        for order, pr in (("any", 0), ("rank", 1), ("index", 1)):
            label = f"{rows}x{_kfmt(n)}/1M"
            anchors.append(_topk("anchor", label, rows, M1, 2048, order, ("fixed", n), priority=pr,
                                 target_us=TARGETS_US.get((label, 2048, order))))
    # fp32 N(0,1) anchors first; then the other orders, bf16 and the serving grids; band last
    cells += _both(anchors)
    # decode small-k grid; k = 32, 64, 128, 160 and 224 on three of its shapes (top-32 / 64 / 128 block
    # selection; 160 / 224: the largest k of nvidia-sm100's two wide warp kernels)
    dec = []
    for rows in (64, 512, 4096, 16384):
        for width in (672, 1344, 4096, 8192):
            dec.append(_topk("decode", f"{rows}x{width}", rows, width, 16, "rank",
                             ("uniform", width // 2, width), priority=1))
    for k in (32, 64, 128, 160, 224):
        for rows, width in ((512, 1344), (4096, 4096), (16384, 8192)):
            dec.append(_topk("decode", f"{rows}x{width}", rows, width, k, "rank",
                             ("uniform", width // 2, width), priority=2))
    cells += _both(dec)
    # DSA decode
    dsa = []
    for nreq, mtp in ((1, 0), (1, 1), (4, 1), (16, 1), (32, 1)):
        rows = nreq * (1 + mtp)
        dsa.append(_topk("dsa-decode", f"{nreq}req+mtp{mtp}", rows, M1, 2048, "any",
                         ("dsa", mtp, 40 * K1, M1), priority=1))
    cells += _both(dsa)
    # ragged prefill
    pre = [
        _topk("prefill", "4096q/128K causal", 4096, 128 * K1, 2048, "any", ("causal", 128 * K1), priority=1,
              target_floor_x=PREFILL_FLOOR_X),
        _topk("prefill", "4096q/packed 64K+32K+16K+16K", 4096, 128 * K1, 2048, "any",
              ("packed", (64 * K1, 32 * K1, 16 * K1, 16 * K1)), priority=2, target_floor_x=PREFILL_FLOOR_X),
    ]
    cells += _both(pre)
    # ICP shards
    icp = []
    for R in (2, 4, 8):
        glen = 512 * K1
        icp.append(_topk("icp", f"16x{_kfmt(glen)}/{R}", 16, glen // R, 2048, "any",
                         ("uniform", glen // 2, glen), index_scale=R, index_offset=R - 1, priority=2))
        icp.append(_merge("icp", f"16x{R}x2048", 16, R, 2048, 2048, "any", priority=2))
        gw = 8192
        icp.append(_topk("icp", f"1024x{gw}/{R}", 1024, gw // R, 16, "rank",
                         ("uniform", gw // 2, gw), index_scale=R, index_offset=R - 1, priority=2))
        icp.append(_merge("icp", f"1024x{R}x16", 1024, R, 16, 16, "rank", priority=2))
    cells += _both([c for c in icp if c.op == "topk"])
    cells += [c for c in icp if c.op == "merge"]  # merge values are float32 only
    return cells


def quick_grid() -> List[Cell]:
    """A tiny grid that runs in seconds on a CPU (reference backend)."""
    cells = [
        _topk("anchor", "64x1344", 64, 1344, 16, "rank", priority=0),
        _topk("decode", "16x672", 16, 672, 16, "rank", ("uniform", 336, 672), priority=1),
        dataclasses.replace(_topk("decode", "32x1344", 32, 1344, 16, "rank", ("uniform", 672, 1344), priority=1),
                            dtype="bfloat16", dist="band"),
        _topk("dsa-decode", "1req+mtp1", 2, 32 * K1, 2048, "any", ("dsa", 1, 4 * K1, 32 * K1), priority=2),
        _topk("prefill", "32q/4K packed", 32, 4 * K1, 128, "any", ("packed", (2 * K1, K1, K1)), priority=2),
        _topk("icp", "8x4096/2", 8, 2048, 16, "rank", ("uniform", 2048, 4096), index_scale=2, index_offset=1,
              priority=3),
        _merge("icp", "8x2x16", 8, 2, 16, 16, "rank", priority=3),
    ]
    return cells


def select_cells(cells: Sequence[Cell], scenarios: Optional[Sequence[str]] = None,
                 dtypes: Optional[Sequence[str]] = None, dists: Optional[Sequence[str]] = None,
                 ops: Optional[Sequence[str]] = None) -> List[Cell]:
    out = []
    for c in cells:
        if scenarios and c.scenario not in scenarios:
            continue
        if dtypes and c.op == "topk" and c.dtype not in dtypes:
            continue
        if dists and c.dist not in dists:
            continue
        if ops and c.op not in ops:
            continue
        out.append(c)
    # stable: priority first, then the grid's own order
    return [c for _, _, c in sorted((c.priority, i, c) for i, c in enumerate(out))]


def by_scenario(cells) -> Dict[str, list]:
    out: Dict[str, list] = {}
    for c in cells:
        out.setdefault(c["scenario"] if isinstance(c, dict) else c.scenario, []).append(c)
    return out
