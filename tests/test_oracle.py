"""Hand-computed checks of the oracle itself (tests/oracle.py).

Every expected answer below was worked out by hand from SPEC §1/§2, not by
running any implementation.
"""

from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

INF = math.inf
NAN = math.nan


def f32(rows):
    return np.array(rows, dtype=np.float32)


def bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32).tolist()


def test_basic_rank_index():
    s = f32([[0.5, 3.0, -1.0, 2.0, 3.0]])
    i, v = oracle.topk(s, 3)
    assert i.tolist() == [[1, 4, 3]]  # 3.0@1 and 3.0@4 tie: low index first
    assert v.tolist() == [[3.0, 3.0, 2.0]]
    i, v = oracle.topk(s, 3, tie_break="high")
    assert i.tolist() == [[4, 1, 3]]
    i, v = oracle.topk(s, 3, order="index")
    assert i.tolist() == [[1, 3, 4]]
    assert v.tolist() == [[3.0, 2.0, 3.0]]
    # the tie rule changes the set when the tie straddles slot k
    assert oracle.topk(s, 1)[0].tolist() == [[1]]
    assert oracle.topk(s, 1, tie_break="high")[0].tolist() == [[4]]
    assert i.dtype == np.int32 and v.dtype == np.float32


def test_padding_when_k_exceeds_valid():
    s = f32([[1.0, 2.0, 9.0, 9.0]])
    i, v = oracle.topk(s, 4, lengths=2)
    assert i.tolist() == [[1, 0, -1, -1]]
    assert v.tolist() == [[2.0, 1.0, -INF, -INF]]


def test_specials_canonical():
    s = f32([[NAN, -0.0, 0.0, -INF, INF, -1.0]])
    i, v = oracle.topk(s, 6)
    # +inf, then +0 (from -0 @1) and +0 @2 tie -> low index, then -1, then
    # -inf @3 and NaN->-inf @0 tie -> low index (0 before 3)
    assert i.tolist() == [[4, 1, 2, 5, 0, 3]]
    assert bits(v[0]) == bits([INF, 0.0, 0.0, -1.0, -INF, -INF])  # no -0 in the output
    i, v = oracle.topk(s, 6, tie_break="high")
    assert i.tolist() == [[4, 2, 1, 5, 3, 0]]


def test_lengths_clamp_and_forms():
    s = f32([[5.0, 4.0, 3.0, 2.0], [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]])
    i, _ = oracle.topk(s, 2, lengths=np.array([-3, 1, 99], dtype=np.int64))
    assert i.tolist() == [[-1, -1], [0, -1], [3, 2]]
    i, _ = oracle.topk(s, 2, lengths=3)
    assert i.tolist() == [[0, 1], [2, 1], [2, 1]]
    i, _ = oracle.topk(s, 2, lengths=0)
    assert i.tolist() == [[-1, -1]] * 3


def test_starts_clamp():
    s = f32([[9.0, 1.0, 2.0, 3.0], [9.0, 1.0, 2.0, 3.0], [9.0, 1.0, 2.0, 3.0], [9.0, 1.0, 2.0, 3.0]])
    starts = np.array([-2, 1, 4, 7])
    i, v = oracle.topk(s, 2, starts=starts)
    # row0: start 0 -> 9.0@0, 3.0@3; row1: start 1 -> cols [1,2,3] -> 3.0@2, 2.0@1
    # rows 2,3: start clamps to 4 -> no columns
    assert i.tolist() == [[0, 3], [2, 1], [-1, -1], [-1, -1]]
    # lengths counts from the start and is clamped to W_r
    i, _ = oracle.topk(s, 3, starts=starts, lengths=np.array([2, 2, 2, 2]))
    assert i.tolist() == [[0, 1, -1], [1, 0, -1], [-1, -1, -1], [-1, -1, -1]]


def test_shard_view():
    # buffer column j is global g = 3*j + 1; length 8 keeps g in {1,4,7}
    s = f32([[1.0, 5.0, 2.0, 7.0]])
    i, v = oracle.topk(s, 4, index_scale=3, index_offset=1, lengths=8)
    assert i.tolist() == [[4, 7, 1, -1]]
    assert v.tolist() == [[5.0, 2.0, 1.0, -INF]]
    # default length is W_r * index_scale = 12: every g in {1,4,7,10} valid
    i, _ = oracle.topk(s, 4, index_scale=3, index_offset=1)
    assert i.tolist() == [[10, 4, 7, 1]]
    # length clamps to W_r * index_scale
    i2, _ = oracle.topk(s, 4, index_scale=3, index_offset=1, lengths=10**9)
    assert i2.tolist() == i.tolist()


def test_forced():
    s = f32([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]])
    # begin 1 forces g=0; end 2 forces g in {4,5} (L = 6)
    i, v = oracle.topk(s, 4, force_begin=1, force_end=2)
    assert i.tolist() == [[0, 4, 5, 3]]  # forced tie at +inf -> low index first
    assert v.tolist() == [[INF, INF, INF, 4.0]]
    i, _ = oracle.topk(s, 4, force_begin=1, force_end=2, tie_break="high")
    assert i.tolist() == [[5, 4, 0, 3]]
    # with a length, the window is counted from L: L = 4 forces g in {3} at the end
    i, _ = oracle.topk(s, 3, lengths=4, force_end=1)
    assert i.tolist() == [[3, 2, 1]]
    # longer than the row: everything forced -> pure index order by the tie rule
    i, v = oracle.topk(s, 3, force_begin=100)
    assert i.tolist() == [[0, 1, 2]]
    assert v.tolist() == [[INF, INF, INF]]
    # a real +inf ties with forced columns
    s2 = f32([[INF, 0.0, 0.0, 0.0]])
    i, _ = oracle.topk(s2, 2, force_end=1, tie_break="high")
    assert i.tolist() == [[3, 0]]
    # forced in a shard view uses the global index and L
    s3 = f32([[1.0, 2.0, 3.0]])  # g = 2j: 0, 2, 4 ; L = 5 -> force_end=1 forces g=4
    i, _ = oracle.topk(s3, 3, index_scale=2, lengths=5, force_begin=1, force_end=1)
    assert i.tolist() == [[0, 4, 2]]


def test_merge_dedupe_and_order():
    idx = np.array([[[4, 2, -1], [2, 7, 9]]], dtype=np.int32)
    val = np.array([[[1.0, 3.0, -INF], [3.0, 3.0, -INF]]], dtype=np.float32)
    i, v = oracle.merge(idx, val, 4)
    # union {4:1, 2:3, 7:3, 9:-inf}; the tie at 3.0 -> low index
    assert i.tolist() == [[2, 7, 4, 9]]
    assert v.tolist() == [[3.0, 3.0, 1.0, -INF]]
    i, v = oracle.merge(idx, val, 5, tie_break="high", order="index")
    assert i.tolist() == [[2, 4, 7, 9, -1]]
    # duplicates keep the highest value
    idx = np.array([[[5, 6], [5, -1]]], dtype=np.int32)
    val = np.array([[[1.0, 2.0], [8.0, -INF]]], dtype=np.float32)
    i, v = oracle.merge(idx, val, 2)
    assert i.tolist() == [[5, 6]] and v.tolist() == [[8.0, 2.0]]


@pytest.mark.parametrize("R", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("tie_break", ["low", "high"])
def test_oracle_composition_law(R, tie_break):
    """merge(topk(shard_s)) == topk(global), on the oracle alone."""
    rng = np.random.default_rng(R)
    n = 53
    g = rng.integers(-3, 4, size=(3, n)).astype(np.float32)  # many ties
    g[0, 5] = np.nan
    lengths = np.array([n, 17, 0])
    for k in (1, 5, 60):
        want = oracle.topk(g, k, lengths=lengths, force_begin=2, force_end=3, tie_break=tie_break)
        w = -(-n // R)
        parts_i, parts_v = [], []
        for s in range(R):
            buf = np.full((3, w), np.nan, dtype=np.float32)
            col = g[:, s::R]
            buf[:, : col.shape[1]] = col
            i, v = oracle.topk(
                buf,
                k,
                lengths=lengths,
                index_scale=R,
                index_offset=s,
                force_begin=2,
                force_end=3,
                tie_break=tie_break,
                order="any",
            )
            parts_i.append(i)
            parts_v.append(v)
        got = oracle.merge(np.stack(parts_i, 1), np.stack(parts_v, 1), k, tie_break=tie_break)
        assert got[0].tolist() == want[0].tolist()
        assert bits(got[1]) == bits(want[1])
