"""A tiny independent pure-torch oracle of SPEC §1/§2 (64-bit keys, sorted).

Kept next to the backend's own tests so they run even without the core's
reference backend; the conformance suite checks against the core's reference.
"""

from __future__ import annotations

import torch


def sord(x: torch.Tensor) -> torch.Tensor:
    """Signed ordered int64 of float32 canonical values."""
    x = x.float().clone()
    x[x == 0] = 0.0
    x[torch.isnan(x)] = float("-inf")
    b = x.view(torch.int32).long()
    return torch.where(b < 0, b ^ 0x7FFFFFFF, b)


def from_sord(s: torch.Tensor) -> torch.Tensor:
    b = torch.where(s < 0, s ^ 0x7FFFFFFF, s).to(torch.int32)
    return b.view(torch.float32)


def _emit(keys, valid, g_of, k, tie_low, order):
    rows, n = keys.shape
    idx = torch.full((rows, k), -1, dtype=torch.int32)
    val = torch.full((rows, k), float("-inf"), dtype=torch.float32)
    for r in range(rows):
        kr = keys[r][valid[r]]
        gr = g_of[r][valid[r]]
        o = torch.argsort(kr, descending=True, stable=True)[:k]
        gsel, ksel = gr[o], kr[o]
        if order == "index":
            p = torch.argsort(gsel, stable=True)
            gsel, ksel = gsel[p], ksel[p]
        m = gsel.numel()
        idx[r, :m] = gsel.to(torch.int32)
        val[r, :m] = from_sord(ksel >> 32)
    return idx, val


def topk(scores, k, lengths=None, starts=None, index_scale=1, index_offset=0,
         force_begin=0, force_end=0, tie_break="low", order="rank"):
    scores = scores.cpu()
    rows, width = scores.shape
    j = torch.arange(width).long()
    if starts is None:
        s = torch.zeros(rows, dtype=torch.long)
    else:
        s = starts.cpu().long().clamp(0, width)
    W = width - s
    if lengths is None:
        L = W * index_scale
    elif isinstance(lengths, int):
        L = torch.full((rows,), lengths, dtype=torch.long).clamp(min=0)
        L = torch.minimum(L, W * index_scale)
    else:
        L = torch.minimum(lengths.cpu().long().clamp(min=0), W * index_scale)
    g = j[None, :] * index_scale + index_offset
    valid = (j[None, :] < W[:, None]) & (g < L[:, None])
    colidx = (s[:, None] + j[None, :]).clamp(max=max(width - 1, 0))
    x = torch.gather(scores.float(), 1, colidx) if width else scores.float()
    so = sord(x)
    forced = (g < force_begin) | (g >= (L[:, None] - force_end))
    so = torch.where(forced, sord(torch.tensor([float("inf")])), so)
    lo = (0xFFFFFFFF - g) if tie_break == "low" else g
    keys = (so << 32) | lo.expand_as(so)
    return _emit(keys, valid, g.expand_as(so), k, tie_break == "low", order)


def merge(indices, values, k, tie_break="low", order="rank"):
    rows = indices.shape[0]
    gi = indices.cpu().reshape(rows, -1).long()
    v = values.cpu().reshape(rows, -1).float()
    so = sord(v)
    valid = gi >= 0
    # dedupe: keep the highest value per g
    keep = torch.zeros_like(valid)
    for r in range(rows):
        best = {}
        for c in range(gi.shape[1]):
            if not valid[r, c]:
                continue
            gg = int(gi[r, c])
            if gg not in best or so[r, c] > so[r, best[gg]]:
                best[gg] = c
        for c in best.values():
            keep[r, c] = True
    lo = (0xFFFFFFFF - gi) if tie_break == "low" else gi
    keys = (so << 32) | torch.where(valid, lo, torch.zeros_like(lo))
    return _emit(keys, keep, gi, k, tie_break == "low", order)
