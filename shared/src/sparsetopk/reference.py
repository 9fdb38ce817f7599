"""The ``reference`` backend: exact by construction, pure torch, any device.

Every valid column gets the 64-bit key of SPEC §1, and ``torch.topk`` over
distinct int64 keys has one answer. Slow (it materialises a key per column
and runs a general top-k), but it serves every k, dtype, order and option, so
it is the floor every backend must beat and the backend of last resort.

To stay inside signed int64 the ordered score word is offset by 2**31, which
keeps the order of the unsigned key.
"""

from __future__ import annotations

from typing import Optional

import torch

from .protocol import Backend, Capabilities, MergeCall, TopKCall

_SENTINEL = torch.iinfo(torch.int64).min  # below every valid key
_LOW32 = 0xFFFFFFFF


def ordered_word(canon: torch.Tensor) -> torch.Tensor:
    """ordered_u32 of float32 canonical scores, as int64 in [0, 2**32)."""
    bits = canon.contiguous().view(torch.int32).to(torch.int64) & _LOW32
    neg = bits >= 0x80000000
    return torch.where(neg, bits ^ _LOW32, bits | 0x80000000)


def canonicalize(x: torch.Tensor) -> torch.Tensor:
    """NaN -> -inf, -0 -> +0, widened exactly to float32."""
    x = x.to(torch.float32)
    x = torch.where(torch.isnan(x), torch.full_like(x, float("-inf")), x)
    return torch.where(x == 0, torch.zeros_like(x), x)


def make_keys(canon: torch.Tensor, g: torch.Tensor, tie_break: str) -> torch.Tensor:
    tie = (_LOW32 - g) if tie_break == "low" else g
    return ((ordered_word(canon) - 2**31) << 32) | tie


def _select(keys, gidx, canon, k, order, indices, values):
    """Top-k of int64 keys per row (sentinel = invalid), written into outputs."""
    rows, n = keys.shape
    if n < k:  # pad with invalid columns so topk can always take k
        pad = k - n
        keys = torch.cat([keys, keys.new_full((rows, pad), _SENTINEL)], 1)
        gidx = torch.cat([gidx, gidx.new_full((rows, pad), -1)], 1)
        canon = torch.cat([canon, canon.new_full((rows, pad), float("-inf"))], 1)
    top, pos = torch.topk(keys, k, dim=1, largest=True, sorted=True)
    valid = top != _SENTINEL
    idx = torch.where(valid, torch.gather(gidx, 1, pos), torch.full_like(pos, -1))
    val = torch.where(valid, torch.gather(canon, 1, pos), torch.full_like(top, float("-inf"), dtype=torch.float32))
    if order == "index":
        # Ascending global index, padding (-1) last.
        sort_key = torch.where(valid, idx, torch.full_like(idx, 2**62))
        sort_key, perm = torch.sort(sort_key, dim=1, stable=True)
        idx = torch.gather(idx, 1, perm)
        val = torch.gather(val, 1, perm)
    # "any" returns rank order: deterministic and valid slots first.
    indices.copy_(idx.to(torch.int32))
    if values is not None:
        values.copy_(val)


class ReferenceBackend(Backend):
    name = "reference"
    version = "0.1.0"
    priority = 0
    interpreted = False
    capabilities = Capabilities(
        vendor="any",
        archs=("any",),
        device_types=("cpu", "cuda", "xpu", "mps"),
    )

    def topk(self, call: TopKCall, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
        scores = call.scores
        rows, width = scores.shape
        dev = scores.device
        scale, offset = call.index_scale, call.index_offset
        j = torch.arange(width, device=dev, dtype=torch.int64).unsqueeze(0)  # [1, width]
        if call.starts is None:
            start = torch.zeros(rows, 1, device=dev, dtype=torch.int64)
        else:
            start = call.starts.to(torch.int64).clamp(0, width).unsqueeze(1)
        w_r = width - start  # [rows, 1]
        if call.lengths is None:
            length = w_r * scale
        elif isinstance(call.lengths, int):
            length = torch.minimum(torch.full_like(w_r, call.lengths), w_r * scale)
        else:
            length = torch.minimum(call.lengths.to(torch.int64).clamp(min=0).unsqueeze(1), w_r * scale)
        g = j * scale + offset
        valid = (j < w_r) & (g < length)
        pos = (start + j).clamp(max=max(width - 1, 0))
        raw = torch.gather(scores, 1, pos.expand(rows, width)) if width else scores.to(torch.float32)
        canon = canonicalize(raw)
        forced = (g < call.force_begin) | (g >= length - call.force_end)
        canon = torch.where(forced, torch.full_like(canon, float("inf")), canon)
        g = g.expand(rows, width)
        keys = torch.where(valid, make_keys(canon, g, call.tie_break), torch.full_like(g, _SENTINEL))
        _select(keys, g, canon, call.k, call.order, indices, values)

    def merge(self, call: MergeCall, indices: torch.Tensor, values: torch.Tensor) -> None:
        rows = call.rows
        idx = call.indices.reshape(rows, -1).to(torch.int64)
        canon = canonicalize(call.values.reshape(rows, -1))
        valid = idx >= 0
        # Count each global index once, with the highest value it carries:
        # sort by (index, value descending) and keep the first of each run.
        dup_key = (idx.clamp(min=0) << 32) | (_LOW32 - ordered_word(canon))
        dup_key = torch.where(valid, dup_key, torch.full_like(dup_key, torch.iinfo(torch.int64).max))
        sorted_key, perm = torch.sort(dup_key, dim=1)
        sidx = torch.gather(idx, 1, perm)
        first = torch.ones_like(sidx, dtype=torch.bool)
        if sidx.shape[1] > 1:
            first[:, 1:] = sidx[:, 1:] != sidx[:, :-1]
        keep = first & torch.gather(valid, 1, perm)
        scanon = torch.gather(canon, 1, perm)
        keys = torch.where(keep, make_keys(scanon, sidx.clamp(min=0), call.tie_break), torch.full_like(sidx, _SENTINEL))
        _select(keys, sidx, scanon, call.k, call.order, indices, values)
