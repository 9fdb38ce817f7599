"""Shard views and merge (SPEC §1 shard view, SPEC §2 merge and its composition law)."""

from __future__ import annotations

import numpy as np
import oracle
import pytest
import torch
from conformance_support import (
    DTYPES,
    ORDERS,
    TIES,
    assert_result_equal,
    check_merge,
    check_topk,
    dirty,
    gen_scores,
    ids,
    lengths_tensor,
    merge_served,
    require_topk,
    scores_tensor,
    topk_served,
)

import sparsetopk


def _shard_buffers(glob: np.ndarray, R: int, rng) -> list:
    """Shard s of a global row holds columns s, s+R, s+2R, ...; every shard
    buffer has the same width ceil(N/R); the tail past N is garbage."""
    rows, n = glob.shape
    w = -(-n // R)
    out = []
    for s in range(R):
        buf = np.full((rows, w), np.nan, dtype=np.float32)
        buf[:, 1::3] = np.inf
        buf[:, 2::3] = 1e30
        col = glob[:, s::R]
        buf[:, : col.shape[1]] = col
        out.append(buf)
    return out


def _composition(bk, glob_np, dtype, k, R, *, lengths, force_begin, force_end, tie, shard_order, order):
    dev = bk.device
    rows, n = glob_np.shape
    common = dict(lengths=lengths, force_begin=force_begin, force_end=force_end, tie_break=tie)
    glob = scores_tensor(glob_np, dtype, dev)
    if not topk_served(bk, glob, k, order=order, **common):
        return
    bufs = [scores_tensor(b, dtype, dev) for b in _shard_buffers(glob_np, R, None)]
    parts = []
    for s, buf in enumerate(bufs):
        # Each shard on its own agrees with the oracle, and so does its set.
        res = check_topk(bk, buf, k, index_scale=R, index_offset=s, order=shard_order, thorough=False, **common)
        if res is None:
            return
        parts.append(res)
    idx = torch.stack([p.indices for p in parts], 1)
    val = torch.stack([p.values for p in parts], 1)
    if not merge_served(bk, idx, val, k, tie_break=tie, order=order):
        return
    want = oracle.topk(
        glob.to(torch.float32).cpu().numpy(),
        k,
        lengths=lengths.cpu().numpy() if isinstance(lengths, torch.Tensor) else lengths,
        force_begin=force_begin,
        force_end=force_end,
        tie_break=tie,
        order=order,
    )
    merged = sparsetopk.merge(idx, val, k, tie_break=tie, order=order, backend=bk.name)
    ctx = f"composition R={R} n={n} k={k} tie={tie} order={order} shard_order={shard_order} fb={force_begin} fe={force_end}"
    assert_result_equal(
        merged.indices.cpu().numpy(), merged.values.cpu().numpy(), want[0], want[1], order, ctx + " merge vs oracle"
    )
    direct = check_topk(bk, glob, k, order=order, thorough=False, expect=want, **common)
    if order != "any":
        assert torch.equal(merged.indices, direct.indices), ctx + ": merge(topk(shards)) != topk(global)"
        assert torch.equal(merged.values.view(torch.int32), direct.values.view(torch.int32)), ctx + " values"
    else:
        m = merged.indices.cpu().numpy()
        d = direct.indices.cpu().numpy()
        assert all(sorted(a) == sorted(b) for a, b in zip(m.tolist(), d.tolist(), strict=True)), ctx + ": sets differ"


_COMP = []
for _ri, _R in enumerate((1, 2, 3, 4, 8)):
    for _ni, _n in enumerate((37, 1025, 8200)):
        for _ki, _k in enumerate((1, 7, 64, 300)):
            _j = _ri + _ni + _ki
            _COMP.append(pytest.param(_R, _n, _k, TIES[_j % 2], ORDERS[_j % 3], ORDERS[(_j + 1) % 3], id=f"R{_R}-n{_n}-k{_k}"))


@pytest.mark.parametrize("R,n,k,tie,order,shard_order", _COMP)
def test_composition_law(bk, R, n, k, tie, order, shard_order):
    """merge(topk(shard_s, k) for s in range(R)) == topk(global, k)."""
    rng = np.random.default_rng(R * 1000 + n + k)
    rows = 4
    glob = gen_scores(rng, rows, n, "grid")
    glob[1] = gen_scores(rng, 1, n, "specials")[0]
    glob[2] = gen_scores(rng, 1, n, "plateau", k=k)[0]
    # global lengths <= n: the shard buffers' tails past n are garbage
    lengths = lengths_tensor([n, max(n // 3, 1), min(k + 1, n), 0], torch.int32, bk.device)
    glob = dirty(glob, lengths=lengths)
    fb, fe = [(0, 0), (2, 5), (4, 0), (0, 3)][(R + k) % 4]
    _composition(
        bk,
        glob,
        DTYPES[(R + n) % 3],
        k,
        R,
        lengths=lengths,
        force_begin=fb,
        force_end=fe,
        tie=tie,
        shard_order=shard_order,
        order=order,
    )


@pytest.mark.parametrize("R", [2, 3, 8])
@pytest.mark.parametrize("tie", TIES)
def test_composition_all_forced_and_ties(bk, R, tie):
    """Forced windows longer than the row, all-equal rows, NaN rows across shards."""
    rng = np.random.default_rng(R)
    n = 97
    glob = np.stack(
        [
            np.full(n, 0.5, np.float32),
            np.full(n, np.nan, np.float32),
            gen_scores(rng, 1, n, "two")[0],
            gen_scores(rng, 1, n, "band")[0],
        ]
    )
    for k in (1, 16, 120):
        combos = [(0, 0), (200, 0), (0, 200), (30, 30), (60, 60)]
        for fb, fe in combos[k % 2 :: 2] if bk.interpreted else combos:
            _composition(
                bk, glob, torch.float32, k, R, lengths=n, force_begin=fb, force_end=fe, tie=tie, shard_order="any", order="rank"
            )


def _random_lists(rng, rows, R, k_in, pool, dup_rate, with_neg_inf=True):
    """R candidate lists per row drawn from a pool of global indices; an index
    listed twice carries the same value (as topk of overlapping shards would)."""
    idx = np.full((rows, R, k_in), -1, np.int32)
    val = np.full((rows, R, k_in), -np.inf, np.float32)
    for r in range(rows):
        gvals = (rng.integers(-6, 6, size=pool) / 4.0).astype(np.float32)
        if with_neg_inf:
            gvals[rng.random(pool) < 0.1] = -np.inf  # a valid column whose score was NaN / -inf
            gvals[rng.random(pool) < 0.05] = np.inf  # forced
        used = set()
        for s in range(R):
            fill = int(rng.integers(0, k_in + 1))
            cands = rng.permutation(pool)[:fill]
            for t, g in enumerate(cands):
                if g in used and rng.random() > dup_rate:
                    continue
                used.add(int(g))
                idx[r, s, t] = g
                val[r, s, t] = gvals[g]
        # shuffle each list: merge accepts any order, padding anywhere it likes
        for s in range(R):
            perm = rng.permutation(k_in)
            idx[r, s] = idx[r, s, perm]
            val[r, s] = val[r, s, perm]
    return idx, val


@pytest.mark.parametrize("R", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("k_in,k", [(1, 1), (4, 3), (16, 16), (16, 40), (64, 64), (300, 300), (64, 7)])
def test_merge_random_with_duplicates(bk, R, k_in, k):
    rng = np.random.default_rng(R * 7 + k_in + k)
    rows = 6
    idx, val = _random_lists(rng, rows, R, k_in, pool=max(2 * k_in, 3), dup_rate=0.7)
    ti = torch.from_numpy(idx).to(bk.device)
    tv = torch.from_numpy(val).to(bk.device)
    for j, order in enumerate(ORDERS):
        check_merge(bk, ti, tv, k, tie_break=TIES[(R + j) % 2], order=order, thorough=order == "rank")


@pytest.mark.parametrize("tie", TIES)
@pytest.mark.parametrize("order", ORDERS)
def test_merge_identical_copies(bk, tie, order):
    """R copies of one list merge to that list (each index counts once)."""
    rng = np.random.default_rng(5)
    scores = scores_tensor(gen_scores(rng, 3, 200, "grid"), torch.float32, bk.device)
    require_topk(bk, scores, 32, tie_break=tie)
    base = sparsetopk.topk(scores, 32, return_values=True, tie_break=tie, backend=bk.name)
    for R in (2, 4, 8):
        idx = base.indices.unsqueeze(1).expand(-1, R, -1).contiguous()
        val = base.values.unsqueeze(1).expand(-1, R, -1).contiguous()
        for k in (8, 32, 50):
            check_merge(bk, idx, val, k, tie_break=tie, order=order, thorough=False)


def test_merge_duplicates_keep_highest_value(bk):
    idx = torch.tensor([[[5, 6, -1], [5, 9, 6]], [[1, 1, 1], [-1, -1, -1]]], dtype=torch.int32, device=bk.device)
    val = torch.tensor(
        [[[1.0, 2.0, float("-inf")], [8.0, 2.0, 2.0]], [[0.5, 0.5, 0.5], [float("-inf")] * 3]],
        dtype=torch.float32,
        device=bk.device,
    )
    for k in (1, 2, 3, 5):
        check_merge(bk, idx, val, k)
        check_merge(bk, idx, val, k, tie_break="high", order="index")


def test_merge_keeps_valid_neg_inf(bk):
    """A valid index whose value is -inf (a NaN score) is a candidate, not padding."""
    idx = torch.tensor([[[3, -1], [7, 2]]], dtype=torch.int32, device=bk.device)
    val = torch.tensor([[[float("-inf"), float("-inf")], [float("-inf"), 1.0]]], dtype=torch.float32, device=bk.device)
    for tie in TIES:
        for k in (1, 2, 3, 4):
            check_merge(bk, idx, val, k, tie_break=tie)


def test_merge_all_padding(bk):
    idx = torch.full((3, 4, 5), -1, dtype=torch.int32, device=bk.device)
    val = torch.full((3, 4, 5), float("-inf"), dtype=torch.float32, device=bk.device)
    for order in ORDERS:
        check_merge(bk, idx, val, 7, order=order)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_merge_of_topk_values_any_order_inputs(bk, dtype):
    """Shard lists produced with order='any' and 'index' merge to the same answer."""
    rng = np.random.default_rng(11)
    n, R, k = 2049, 4, 64
    glob = gen_scores(rng, 3, n, "band")
    bufs = _shard_buffers(glob, R, rng)
    results = {}
    for shard_order in ORDERS:
        parts = []
        for s, b in enumerate(bufs):
            t = scores_tensor(b, dtype, bk.device)
            if not topk_served(bk, t, k, index_scale=R, index_offset=s, lengths=n, order=shard_order):
                return
            parts.append(
                sparsetopk.topk(
                    t, k, index_scale=R, index_offset=s, lengths=n, order=shard_order, return_values=True, backend=bk.name
                )
            )
        idx = torch.stack([p.indices for p in parts], 1)
        val = torch.stack([p.values for p in parts], 1)
        results[shard_order] = check_merge(bk, idx, val, k, thorough=False)
        if results[shard_order] is None:
            return
    for o in ("index", "any"):
        assert torch.equal(results[o].indices, results["rank"].indices)
