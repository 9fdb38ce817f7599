"""An independent oracle for SPEC §1 (topk) and §2 (merge), in plain NumPy/Python.

Written from /work/shared/SPEC.md only; it deliberately shares no code with
the ``sparsetopk`` package (do not import it here). It trades all speed for
being obviously right: every row is handled on its own, every column is
visited in a Python loop, and the rank order is a Python sort on
``(canonical value, tie-ordered global index)`` tuples of Python floats and
ints (float32 widens exactly to a Python float, so nothing is rounded).

Inputs are NumPy arrays (or anything ``np.asarray`` accepts). ``scores`` must
already be float32: bfloat16 / float16 scores widen exactly to float32, so the
caller converts them first (``tensor.float().cpu().numpy()``).

Both functions return ``(indices, values)``: int32 ``[rows, k]`` and float32
``[rows, k]``, padded with -1 / -inf. For ``order="any"`` the oracle returns
the rank order; callers compare the set.
"""

from __future__ import annotations

import math

import numpy as np

TIE_BREAKS = ("low", "high")
ORDERS = ("rank", "index", "any")


def _clamp(x: int, lo: int, hi: int) -> int:
    return max(lo, min(x, hi))


def canonical(x: float, forced: bool = False) -> float:
    """SPEC §1: +inf if forced; -inf if NaN; +0.0 if zero; else x itself."""
    if forced:
        return math.inf
    if math.isnan(x):
        return -math.inf
    if x == 0.0:
        return 0.0  # folds -0.0 into +0.0
    return x


def rank_key(value: float, g: int, tie_break: str):
    """Sort key: ascending sort of these keys == best first.

    Higher canonical value first; on equal values the lower global index
    first for ``tie_break="low"``, the higher one first for ``"high"``.
    """
    if tie_break == "low":
        return (-value, g)
    if tie_break == "high":
        return (-value, -g)
    raise ValueError(f"tie_break must be 'low' or 'high', got {tie_break!r}")


def _emit(chosen, k: int, order: str):
    """chosen: list of (value, g) already in rank order, at most k long."""
    if order == "index":
        chosen = sorted(chosen, key=lambda vg: vg[1])
    elif order not in ("rank", "any"):
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    idx = [-1] * k
    val = [-math.inf] * k
    for slot, (v, g) in enumerate(chosen):
        idx[slot] = g
        val[slot] = v
    return idx, val


def row_geometry(width: int, start, length, index_scale: int):
    """(s, W_r, L_r) of one row: start clamped to [0, width], W_r = width - s,
    L_r = clamp(length, 0, W_r * index_scale) (default W_r * index_scale)."""
    s = 0 if start is None else _clamp(int(start), 0, width)
    w_r = width - s
    full = w_r * index_scale
    length_r = full if length is None else _clamp(int(length), 0, full)
    return s, w_r, length_r


def topk(
    scores,
    k: int,
    *,
    lengths=None,
    starts=None,
    index_scale: int = 1,
    index_offset: int = 0,
    force_begin: int = 0,
    force_end: int = 0,
    tie_break: str = "low",
    order: str = "rank",
):
    """Exact top-k of SPEC §1. ``lengths``: None, a Python int, or an array
    ``[rows]``; ``starts``: None or an array ``[rows]``."""
    scores = np.asarray(scores)
    if scores.ndim != 2 or scores.dtype != np.float32:
        raise TypeError("oracle.topk wants a 2-D float32 array (widen bf16/fp16 first)")
    if k < 1:
        raise ValueError("k must be >= 1")
    if index_scale < 1 or not (0 <= index_offset < index_scale):
        raise ValueError("bad shard view")
    if force_begin < 0 or force_end < 0:
        raise ValueError("bad force_*")
    rows, width = scores.shape
    if lengths is not None and not isinstance(lengths, (int, np.integer)):
        lengths = np.asarray(lengths)
        assert lengths.shape == (rows,)
    if starts is not None:
        starts = np.asarray(starts)
        assert starts.shape == (rows,)

    out_i = np.full((rows, k), -1, dtype=np.int32)
    out_v = np.full((rows, k), -np.inf, dtype=np.float32)
    for r in range(rows):
        if lengths is None or isinstance(lengths, (int, np.integer)):
            length = lengths
        else:
            length = lengths[r]
        s, w_r, length_r = row_geometry(width, None if starts is None else starts[r], length, index_scale)
        row = scores[r].tolist()  # Python floats, exact widening of float32
        cands = []
        for j in range(w_r):
            g = j * index_scale + index_offset
            if g >= length_r:  # g grows with j: nothing after is valid either
                break
            forced = g < force_begin or g >= length_r - force_end
            cands.append((canonical(row[s + j], forced), g))
        cands.sort(key=lambda vg: rank_key(vg[0], vg[1], tie_break))
        idx, val = _emit(cands[:k], k, order)
        out_i[r] = np.array(idx, dtype=np.int64).astype(np.int32)
        out_v[r] = np.array(val, dtype=np.float64).astype(np.float32)
    return out_i, out_v


def merge(indices, values, k: int, *, tie_break: str = "low", order: str = "rank"):
    """Exact top-k of the union of R candidate lists per row (SPEC §2).

    ``indices`` int [rows, R, k_in] (-1 = padding), ``values`` float32
    [rows, R, k_in]. A global index seen more than once counts once, with the
    highest value it carries.
    """
    indices = np.asarray(indices)
    values = np.asarray(values)
    if indices.ndim != 3 or indices.shape != values.shape:
        raise ValueError("merge wants indices and values of one shape [rows, R, k_in]")
    if k < 1:
        raise ValueError("k must be >= 1")
    rows = indices.shape[0]
    out_i = np.full((rows, k), -1, dtype=np.int32)
    out_v = np.full((rows, k), -np.inf, dtype=np.float32)
    for r in range(rows):
        best = {}
        for g, v in zip(indices[r].reshape(-1).tolist(), values[r].reshape(-1).tolist(), strict=True):
            if g < 0:
                continue  # padding slot
            v = canonical(v)
            if g not in best or v > best[g]:
                best[g] = v
        cands = sorted(((v, g) for g, v in best.items()), key=lambda vg: rank_key(vg[0], vg[1], tie_break))
        idx, val = _emit(cands[:k], k, order)
        out_i[r] = np.array(idx, dtype=np.int64).astype(np.int32)
        out_v[r] = np.array(val, dtype=np.float64).astype(np.float32)
    return out_i, out_v
