"""Input buffers for a cell: real-shaped scores in rotating views past L2.

A cell's call reads only its rows' valid columns. To keep replays from
hitting L2, the timing loop cycles through ``n_views`` input views whose
valid bytes together exceed a multiple of the L2 size. Views are carved from
one flat allocation: view ``i`` is ``as_strided`` at an offset, with the
cell's own row stride, so a short row (40K valid of a 1M-column buffer)
costs 40K of fresh memory per view, not 1M. The columns past a row's valid
range hold other views' data, which the contract says must not matter.
"""

from __future__ import annotations

import dataclasses
import math
from typing import List, Optional

import torch

from .scenarios import Cell, Geometry, geometry

_ALIGN = 128  # elements between view offsets (512 B in fp32)
_CHUNK = 1 << 22  # elements generated at a time


def torch_dtype(name: str) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def fill_(flat: torch.Tensor, dist: str, seed: int) -> None:
    """Fill a 1-D tensor with the distribution, chunk by chunk (bounded temp memory)."""
    gen = torch.Generator(device=flat.device)
    gen.manual_seed(seed & 0x7FFFFFFF)
    n = flat.numel()
    chunk = _CHUNK * (16 if flat.device.type == "cuda" else 1)  # 4M / 64M draws at a time
    if dist == "band":
        chunk //= 64
    for lo in range(0, n, chunk):
        hi = min(n, lo + chunk)
        if dist == "normal":
            x = torch.randn(hi - lo, generator=gen, device=flat.device, dtype=torch.float32)
        elif dist == "band":  # max-pooled block logits: max of 64 N(0,1) draws
            x = torch.randn((hi - lo, 64), generator=gen, device=flat.device, dtype=torch.float32).amax(dim=1)
        else:
            raise ValueError(f"unknown distribution {dist!r}")
        flat[lo:hi].copy_(x)


def valid_score_bytes(cell: Cell, geo: Optional[Geometry] = None) -> int:
    """Bytes of scores a call must read: the valid columns of every row."""
    if cell.op == "merge":
        return cell.rows * cell.shards * cell.k_in * 8  # int32 index + float32 value
    geo = geo if geo is not None else geometry(cell)
    return int(geo.valid_cols.sum()) * torch_dtype(cell.dtype).itemsize


def floor_bytes(cell: Cell, geo: Optional[Geometry] = None, return_values: bool = False) -> int:
    """Bytes-read floor: valid scores (+ per-row metadata) read, outputs written."""
    rows, k = cell.rows, cell.k
    if cell.op == "merge":
        return valid_score_bytes(cell) + rows * k * 8
    geo = geo if geo is not None else geometry(cell)
    meta = 0
    if geo.lengths is not None:
        meta += rows * 4
    if geo.starts is not None:
        meta += rows * 4
    out = rows * k * 4 + (rows * k * 4 if return_values else 0)
    return valid_score_bytes(cell, geo) + meta + out


@dataclasses.dataclass
class Inputs:
    """Rotating views of one cell's inputs, plus shared outputs."""

    views: List[dict]  # each: kwargs for the call (scores/lengths/starts or indices/values)
    n_views: int
    alloc_bytes: int
    rotate_bytes: int  # valid bytes touched by one pass over the views
    extent: int  # dense column extent a baseline (torch.topk) reads


def plan_views(cell: Cell, l2_bytes: int, rotate_factor: float, max_views: int, max_alloc: int,
               device: torch.device) -> int:
    """How many views: enough that one pass reads > rotate_factor * L2."""
    if device.type != "cuda" or l2_bytes <= 0:
        return 1
    per = max(1, valid_score_bytes(cell))
    n = max(1, math.ceil(rotate_factor * l2_bytes / per))
    n = min(n, max_views)
    while n > 1 and estimate_alloc(cell, n) > max_alloc:
        n = max(1, n // 2)
    return n


def estimate_alloc(cell: Cell, n_views: int) -> int:
    if cell.op == "merge":
        return n_views * valid_score_bytes(cell)
    geo = geometry(cell)
    return _flat_elems(cell, geo, n_views)[0] * torch_dtype(cell.dtype).itemsize


def _flat_elems(cell: Cell, geo: Geometry, n_views: int):
    rows, w = cell.rows, cell.width
    step = min(w, -(-geo.extent // _ALIGN) * _ALIGN)
    per_block = max(1, w // step)  # views sharing one block of rows
    blocks = -(-n_views // per_block)
    total = blocks * rows * w + (per_block - 1) * step
    return total, step, per_block


def build_inputs(cell: Cell, n_views: int, device: torch.device, seed: int = 0) -> Inputs:
    if cell.op == "merge":
        return _merge_inputs(cell, n_views, device, seed)
    geo = geometry(cell)
    dt = torch_dtype(cell.dtype)
    total, step, per_block = _flat_elems(cell, geo, n_views)
    flat = torch.empty(total, dtype=dt, device=device)
    fill_(flat, cell.dist, cell.seed() ^ seed)
    lengths = None if geo.lengths is None else torch.as_tensor(geo.lengths, dtype=torch.int32).to(device)
    starts = None if geo.starts is None else torch.as_tensor(geo.starts, dtype=torch.int32).to(device)
    views = []
    rows, w = cell.rows, cell.width
    for i in range(n_views):
        off = (i // per_block) * rows * w + (i % per_block) * step
        scores = flat.as_strided((rows, w), (w, 1), off)
        kw = {"scores": scores, "lengths": lengths, "starts": starts}
        views.append(kw)
    per = valid_score_bytes(cell, geo)
    return Inputs(views, n_views, total * dt.itemsize, per * n_views, geo.extent)


def _merge_inputs(cell: Cell, n_views: int, device: torch.device, seed: int) -> Inputs:
    """R disjoint shard lists per row (global index = j * R + s), best first, some padding."""
    rows, R, kin = cell.rows, cell.shards, cell.k_in
    gen = torch.Generator(device="cpu")
    gen.manual_seed((cell.seed() ^ seed) & 0x7FFFFFFF)
    views = []
    for _i in range(n_views):
        # distinct per-shard columns: a random increasing sequence per list
        gaps = torch.randint(1, 8, (rows, R, kin), generator=gen, dtype=torch.int64)
        j = torch.cumsum(gaps, dim=2)
        s = torch.arange(R, dtype=torch.int64).view(1, R, 1)
        idx = (j * R + s).to(torch.int32)
        if cell.dist == "band":
            val = torch.randn((rows, R, kin, 8), generator=gen).amax(-1)
        else:
            val = torch.randn((rows, R, kin), generator=gen)
        val = val.sort(dim=2, descending=True).values
        # the last shard of odd rows is short: padded with -1 / -inf
        pad = kin // 4
        if pad:
            idx[1::2, R - 1, kin - pad:] = -1
            val[1::2, R - 1, kin - pad:] = float("-inf")
        views.append({"indices": idx.to(device), "values": val.to(device)})
    per = valid_score_bytes(cell)
    return Inputs(views, n_views, per * n_views, per * n_views, R * kin)
