"""A NumPy model of the warp kernel's streaming threshold filter (csrc/topk_warp.cuh),
used to choose which of a lane's P share maxima warp_kth16p counts (CPU only).

A row is read in 1024-column chunks; lane L holds the chunk's elements e = v*4 + i
(column v*128 + 4L + i, fp32 layout) and keeps P running maxima over the shares
e mod P. After each chunk that can matter, T = max(T, bound(maxima, k)) and the
chunk's columns >= T are appended to a buffer of `cap` keys (compacted against T
when full; overflow = the radix fallback). Reported per (width, k, rule): keys
appended, survivors S left after the final filter, compactions, overflows.

    python ci/warp_bound_model.py            # P = 8, k = 65 / 96 / 128 (the forty-first session's table)
    MODEL_P=4 MODEL_KS=33,48,64 MODEL_CAP=256 python ci/warp_bound_model.py
    MODEL_KS=160,192 MODEL_RANKS=4,5,6 MODEL_CAP=1024 python ci/warp_bound_model.py  # k past 128
"""
import os

import numpy as np

P = int(os.environ.get("MODEL_P", "8"))
KS = [int(k) for k in os.environ.get("MODEL_KS", "65,96,128").split(",")]
WIDTHS = [int(n) for n in os.environ.get("MODEL_WIDTHS", "1344,4096,16384,65536").split(",")]
CAP = int(os.environ.get("MODEL_CAP", "512"))
ROWS = int(os.environ.get("MODEL_ROWS", "20"))


def run(row, k, bound):
    n = len(row)
    nch = (n + 1023) // 1024
    pad = np.full(nch * 1024, -np.inf)
    pad[:n] = row
    ch = pad.reshape(nch, 8, 32, 4).transpose(0, 2, 1, 3).reshape(nch, 32, 32)  # [chunk, lane, e]
    pm = np.full((32, P), -np.inf)
    T, cand, appended, compactions = -np.inf, [], 0, 0
    for c in range(nch):
        x = ch[c]
        cq = np.stack([x[:, q::P].max(1) for q in range(P)], 1)
        if not (cq >= T).any():
            continue  # the chunk cannot raise T and has no survivor
        pm = np.maximum(pm, cq)
        T = max(T, bound(pm, k))
        s = x[x >= T]
        if len(cand) + len(s) > CAP:
            cand = [v for v in cand if v >= T]
            compactions += 1
            if len(cand) + len(s) > CAP:
                return appended, -1, compactions, True
        cand += list(s)
        appended += len(s)
    return appended, sum(v >= T for v in cand), compactions, False


def exact(pm, k):
    return np.sort(pm.ravel())[-k]


def counted(rank_of):
    """Count one value a lane, its rank_of(k)-th largest: the largest counted value
    with >= k of the 32 P values at or above it (-inf when none qualifies)."""
    def bound(pm, k):
        vals = -np.sort(-pm, 1)[:, rank_of(k) - 1]
        allv = pm.ravel()
        ok = [c for c in vals if (allv >= c).sum() >= k]
        return max(ok) if ok else -np.inf
    return bound


RULES = {"exact": exact}
RANKS = [int(r) for r in os.environ.get("MODEL_RANKS", ",".join(str(r) for r in range(1, P // 2 + 1))).split(",")]
for r in RANKS:
    RULES[f"rank {r}"] = counted(lambda k, r=r: r)
rng = np.random.default_rng(0)
print(f"P = {P}, buffer {CAP} keys, {ROWS} N(0, 1) rows a cell")
print("| width | k | counted | appended (mean / max) | S (mean / max) | compactions | overflows |")
print("|---|---|---|---|---|---|---|")
for n in WIDTHS:
    for k in KS:
        for name, rule in RULES.items():
            res = [run(rng.standard_normal(n), k, rule) for _ in range(ROWS)]
            ok = [r for r in res if not r[3]]
            ap = [r[0] for r in ok] or [0]
            S = [r[1] for r in ok] or [0]
            print(f"| {n} | {k} | {name} | {np.mean(ap):.0f} / {max(ap)} | {np.mean(S):.0f} / {max(S)} | "
                  f"{np.mean([r[2] for r in res]):.2f} | {sum(r[3] for r in res)} |")
