"""Forced columns, ties, signed zeros, infinities, NaN, narrow bands, dirty columns."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conformance_support import (
    DTYPES,
    ORDERS,
    TIES,
    check_topk,
    dirty,
    gen_scores,
    ids,
    lengths_tensor,
    scores_tensor,
)

INF = float("inf")
NAN = float("nan")


# --------------------------------------------------------------------------
# forced begin / end
# --------------------------------------------------------------------------
FORCED = [(0, 0), (1, 0), (0, 1), (4, 4), (4, 64), (64, 4), (10, 10), (300, 0), (0, 300), (1000, 1000), (2**31 + 5, 0)]


@pytest.mark.parametrize("fb,fe", FORCED, ids=[f"b{a}-e{b}" for a, b in FORCED])
@pytest.mark.parametrize("k", [1, 7, 64])
def test_forced(bk, fb, fe, k):
    rng = np.random.default_rng(fb * 31 + fe + k)
    width = 260
    # Lengths make the windows overlap each other (short rows) or exceed the row.
    lvals = [width, 3, 0, 1, 15, 20, k, 128, 10**6]
    lengths = lengths_tensor(lvals, torch.int32, bk.device)
    arr = gen_scores(rng, len(lvals), width, "grid")
    arr[1, :] = np.inf  # real +inf ties with forced columns
    arr[2, ::2] = np.nan
    arr = dirty(arr, lengths=lengths)
    for j, order in enumerate(ORDERS):
        check_topk(
            bk,
            scores_tensor(arr, DTYPES[(k + j) % 3], bk.device),
            k,
            lengths=lengths,
            force_begin=fb,
            force_end=fe,
            order=order,
            tie_break=TIES[j % 2],
            thorough=j == 0,
        )


@pytest.mark.parametrize("scale,offset", [(2, 0), (2, 1), (3, 2), (8, 7)])
@pytest.mark.parametrize("fb,fe", [(1, 0), (0, 1), (5, 17), (100, 100)])
def test_forced_in_shard_view(bk, scale, offset, fb, fe):
    """Forced windows are in global columns, with the global length."""
    rng = np.random.default_rng(scale + offset + fb)
    width = 150
    lvals = [width * scale, 40, 2, 0, 333, 17 * scale + offset]
    lengths = lengths_tensor(lvals, torch.int64, bk.device)
    arr = dirty(gen_scores(rng, len(lvals), width, "int_small"), lengths=lengths, index_scale=scale, index_offset=offset)
    for k in (1, 16, 64):
        for tie in TIES:
            check_topk(
                bk,
                scores_tensor(arr, torch.float32, bk.device),
                k,
                lengths=lengths,
                index_scale=scale,
                index_offset=offset,
                force_begin=fb,
                force_end=fe,
                tie_break=tie,
                thorough=False,
            )


@pytest.mark.parametrize("length", [None, 0, 5, 77])
def test_forced_with_python_int_length(bk, length):
    rng = np.random.default_rng(1)
    arr = dirty(gen_scores(rng, 3, 100, "normal"), lengths=length)
    for fb, fe in [(3, 8), (50, 50), (0, 200)]:
        for order in ORDERS:
            check_topk(
                bk,
                scores_tensor(arr, torch.float32, bk.device),
                16,
                lengths=length,
                force_begin=fb,
                force_end=fe,
                order=order,
                thorough=False,
            )


# --------------------------------------------------------------------------
# ties
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("tie", TIES)
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("width", [33, 1025, 4100])
def test_ties(bk, dtype, tie, order, width):
    rng = np.random.default_rng(width)
    rows = [
        np.full(width, 0.5, np.float32),  # all equal
        gen_scores(rng, 1, width, "two")[0],  # two values
        gen_scores(rng, 1, width, "grid")[0],  # a grid exact in bf16 and fp16
        gen_scores(rng, 1, width, "int_small")[0],
    ]
    arr = np.stack(rows)
    for k in (1, 7, 16, 64, 300):
        check_topk(bk, scores_tensor(arr, dtype, bk.device), k, tie_break=tie, order=order, thorough=k == 16)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("k", [1, 2, 5, 16, 64, 300, 2048])
def test_plateau_straddles_slot_k(bk, dtype, k):
    """k-3 clear winners then 8 equal maxima of the rest: the tie rule picks 3 of the 8."""
    rng = np.random.default_rng(k)
    width = max(4 * k, 100)
    arr = gen_scores(rng, 3, width, "plateau", k=k)
    for tie in TIES:
        for order in ORDERS:
            check_topk(bk, scores_tensor(arr, dtype, bk.device), k, tie_break=tie, order=order, thorough=order == "rank")


@pytest.mark.parametrize("tie", TIES)
def test_bf16_fp16_grids(bk, tie):
    """Values that collapse under bf16/fp16 rounding: ties appear only after widening."""
    rng = np.random.default_rng(9)
    arr = (1.0 + rng.integers(0, 2**12, size=(4, 3000)) * 2.0**-14).astype(np.float32)
    for dtype in (torch.bfloat16, torch.float16):
        for k in (16, 300, 2048):
            check_topk(bk, scores_tensor(arr, dtype, bk.device), k, tie_break=tie, thorough=False)


# --------------------------------------------------------------------------
# specials
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("tie", TIES)
def test_signed_zero(bk, dtype, tie):
    """-0 == +0: ties between them go by index, and values come out as +0."""
    width = 200
    arr = np.where(np.arange(width) % 2 == 0, np.float32(-0.0), np.float32(0.0)).astype(np.float32)
    arr = np.stack([arr, -arr, np.where(np.arange(width) % 5 == 0, -1.0, -0.0).astype(np.float32)])
    arr[0, 7] = 1.0
    for k in (1, 3, 16, 190):
        for order in ORDERS:
            res = check_topk(bk, scores_tensor(arr, dtype, bk.device), k, tie_break=tie, order=order, thorough=False)
            if res is None:
                continue
            vals = res.values.cpu().numpy()
            assert not np.any((vals == 0) & np.signbit(vals)), "a -0.0 came out as a value"


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("tie", TIES)
def test_infinities_and_nan(bk, dtype, tie):
    """+inf ranks first; NaN canonicalises to -inf and ties with real -inf by index."""
    rng = np.random.default_rng(4)
    width = 129
    r0 = np.full(width, NAN, np.float32)
    r1 = np.full(width, -INF, np.float32)
    r1[::3] = NAN
    r2 = np.full(width, INF, np.float32)
    r2[5::4] = -INF
    r3 = gen_scores(rng, 1, width, "specials")[0]
    r4 = np.full(width, -1e30, np.float32)
    r4[::7] = NAN
    r4[3] = INF
    arr = np.stack([r0, r1, r2, r3, r4])
    for k in (1, 4, 33, 129, 200):
        for order in ORDERS:
            check_topk(bk, scores_tensor(arr, dtype, bk.device), k, tie_break=tie, order=order, thorough=order == "any")


@pytest.mark.parametrize("dist", ["band", "band_neg", "subnormal"])
@pytest.mark.parametrize("k", [16, 64, 300, 2048])
@pytest.mark.parametrize("tie", TIES)
def test_narrow_band_f32(bk, dist, k, tie):
    """Thousands of float32 values within a few ulps of the threshold."""
    rng = np.random.default_rng(k)
    arr = gen_scores(rng, 3, 8200, dist)
    lengths = lengths_tensor([8200, 5000, 2049], torch.int32, bk.device)
    arr = dirty(arr, lengths=lengths)
    for order in ORDERS:
        check_topk(
            bk,
            scores_tensor(arr, torch.float32, bk.device),
            k,
            lengths=lengths,
            tie_break=tie,
            order=order,
            thorough=order == "rank",
        )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
@pytest.mark.parametrize("k", [16, 64, 300, 2048])
def test_narrow_band_half(bk, dtype, k):
    """Half-precision rows where thousands of values are identical at the threshold."""
    rng = np.random.default_rng(k + 1)
    width = 8200
    base = np.float32(1.0)
    ulp = np.float32(2.0**-7 if dtype == torch.bfloat16 else 2.0**-10)
    arr = (base + rng.integers(0, 3, size=(3, width)).astype(np.float32) * ulp).astype(np.float32)
    arr[1] = -arr[1]
    for tie in TIES:
        check_topk(bk, scores_tensor(arr, dtype, bk.device), k, tie_break=tie, thorough=tie == "low")


# --------------------------------------------------------------------------
# dirty columns
# --------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("fill", [NAN, INF, 1e30, -INF])
def test_dirty_columns_never_selected(bk, dtype, fill):
    """Columns past each row's length (and before its start) hold garbage that
    would win if looked at; the valid part is all -inf / NaN / ties."""
    width = 777
    lvals = [0, 1, 5, 64, 400, 776]
    starts = torch.tensor([0, 3, 100, 700, 0, 1], dtype=torch.int64, device=bk.device)
    lengths = lengths_tensor(lvals, torch.int32, bk.device)
    arr = np.full((len(lvals), width), fill, np.float32)
    valid = np.full((len(lvals), width), -INF, np.float32)
    valid[:, ::2] = NAN
    s = starts.cpu().numpy()
    for r, L in enumerate(lvals):
        end = min(s[r] + L, width)
        arr[r, s[r] : end] = valid[r, s[r] : end]
    for k in (1, 16, 64, 1000):
        for order in ORDERS:
            res = check_topk(
                bk, scores_tensor(arr, dtype, bk.device), k, lengths=lengths, starts=starts, order=order, thorough=False
            )
            if res is None:
                continue
            got = res.indices.cpu().numpy()
            for r, L in enumerate(lvals):
                w_r = width - s[r]
                assert ((got[r] < min(L, w_r)) | (got[r] == -1)).all(), "an invalid column was selected"
