"""Selection across widths, k, dtypes, orders and tie rules (SPEC §1)."""

from __future__ import annotations

import itertools

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
    require_topk,
    scores_tensor,
)

import sparsetopk

# Widths around the 32/64/768/1024/2048 edges and past 8192.
WIDTHS = (31, 32, 33, 63, 64, 65, 767, 768, 769, 1023, 1024, 1025, 2047, 2048, 2049, 8200)
# k = 1, small, 16, 64, large; many of them exceed the valid columns of a row.
KS = (1, 3, 7, 16, 64, 300, 2048)

_MATRIX = []
for _i, (_w, _k) in enumerate(itertools.product(WIDTHS, KS)):
    _MATRIX.append(
        pytest.param(
            _w,
            _k,
            DTYPES[_i % 3],
            ORDERS[(_i // 3) % 3],
            TIES[(_i // 9) % 2],
            _i % 2 == 1,
            id=f"w{_w}-k{_k}-{ids([DTYPES[_i % 3]])[0]}-{ORDERS[(_i // 3) % 3]}-{TIES[(_i // 9) % 2]}-{'len' if _i % 2 else 'full'}",
        )
    )


@pytest.mark.parametrize("width,k,dtype,order,tie,with_lengths", _MATRIX)
def test_width_k_matrix(bk, width, k, dtype, order, tie, with_lengths):
    rng = np.random.default_rng(width * 7919 + k)
    rows = 3
    # Values from a coarse grid: plenty of exact ties, representable in every dtype.
    arr = (rng.integers(-width, width, size=(rows, width)) / 64.0).astype(np.float32)
    arr[1] = gen_scores(rng, 1, width, "normal")[0]
    lengths = None
    if with_lengths:
        lvals = [width, max(width // 2 + 1, 1), min(k + 1, width)]
        lengths = lengths_tensor(lvals, torch.int32 if k % 2 else torch.int64, bk.device)
        arr = dirty(arr, lengths=lengths)
    scores = scores_tensor(arr, dtype, bk.device)
    check_topk(bk, scores, k, lengths=lengths, tie_break=tie, order=order)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("tie", TIES)
@pytest.mark.parametrize("width,k", [(129, 16), (1025, 64), (3000, 300)])
def test_dtype_order_tie(bk, dtype, order, tie, width, k):
    """Every dtype x order x tie rule, on data where the tie rule matters."""
    rng = np.random.default_rng(k)
    arr = np.concatenate(
        [gen_scores(rng, 1, width, "plateau", k=k), gen_scores(rng, 1, width, "grid"), gen_scores(rng, 1, width, "normal")]
    )
    scores = scores_tensor(arr, dtype, bk.device)
    check_topk(bk, scores, k, tie_break=tie, order=order)


@pytest.mark.parametrize("k", [1, 7, 64, 300, 2048])
def test_large_row_counts(bk, k):
    """Many short rows (a decode batch): each row independent."""
    rng = np.random.default_rng(k)
    rows, width = 67, 2100
    arr = gen_scores(rng, rows, width, "grid")
    lengths = torch.from_numpy(rng.integers(-3, width + 50, size=rows)).to(torch.int64).to(bk.device)
    arr = dirty(arr, lengths=lengths)
    check_topk(bk, scores_tensor(arr, torch.bfloat16, bk.device), k, lengths=lengths, thorough=False)


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_single_column_and_single_row(bk, dtype):
    check_topk(bk, scores_tensor(np.array([[2.5], [-1.0]], np.float32), dtype, bk.device), 3)
    check_topk(bk, scores_tensor(np.array([[2.5, 7.0, -1.0, 7.0]], np.float32), dtype, bk.device), 1)
    check_topk(bk, scores_tensor(np.array([[2.5, 7.0, -1.0, 7.0]], np.float32), dtype, bk.device), 1, tie_break="high")


def test_zero_rows(bk):
    """rows = 0: an empty [0, k] answer (SPEC is silent; the natural answer)."""
    scores = torch.empty((0, 100), dtype=torch.bfloat16, device=bk.device)
    require_topk(bk, scores, 5)
    res = sparsetopk.topk(scores, 5, return_values=True, backend=bk.name)
    assert tuple(res.indices.shape) == (0, 5) and tuple(res.values.shape) == (0, 5)
    assert res.indices.dtype == torch.int32 and res.values.dtype == torch.float32


def test_zero_width(bk):
    """width = 0: no valid column, every slot is padding."""
    scores = torch.empty((3, 0), dtype=torch.bfloat16, device=bk.device)
    check_topk(bk, scores, 4)
    starts = torch.tensor([0, 1, -1], dtype=torch.int32, device=bk.device)
    check_topk(bk, scores, 4, lengths=lengths_tensor([1, 0, -1], torch.int64, bk.device), starts=starts)
