"""Row lengths and ragged starts (SPEC §1): clamping, forms, dirty columns."""

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

INT32_MAX = 2**31 - 1


def _length_values(k, width, ldtype):
    vals = [-5, -1, 0, 1, k - 1, k, k + 1, width - 1, width, width + 1, 2 * width, INT32_MAX]
    if ldtype == torch.int64:
        vals += [2**40, -(2**40)]
    return vals


@pytest.mark.parametrize("ldtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("k", [1, 7, 64, 300])
@pytest.mark.parametrize("width", [100, 1025])
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
def test_lengths_tensor(bk, ldtype, k, width, dtype):
    rng = np.random.default_rng(k + width)
    lvals = _length_values(k, width, ldtype)
    lengths = lengths_tensor(lvals, ldtype, bk.device)
    arr = dirty(gen_scores(rng, len(lvals), width, "grid"), lengths=lengths)
    check_topk(bk, scores_tensor(arr, dtype, bk.device), k, lengths=lengths, order=ORDERS[k % 3], tie_break=TIES[k % 2])


@pytest.mark.parametrize("k", [1, 7, 64])
@pytest.mark.parametrize("length", ["neg", 0, 1, "k-1", "k", "k+1", "w", "w+1", "huge", "hugeneg"])
def test_lengths_python_int(bk, k, length):
    width = 333
    length = {
        "neg": -7,
        "k-1": k - 1,
        "k": k,
        "k+1": k + 1,
        "w": width,
        "w+1": width + 1,
        "huge": 2**45,
        "hugeneg": -(2**45),
    }.get(length, length)
    rng = np.random.default_rng(k)
    arr = dirty(gen_scores(rng, 4, width, "grid"), lengths=length)
    for order in ORDERS:
        check_topk(bk, scores_tensor(arr, torch.float32, bk.device), k, lengths=length, order=order)


@pytest.mark.parametrize("form", ["int", "int32", "int64", "none"])
def test_lengths_forms_agree(bk, form):
    """A Python int, an int32 tensor and an int64 tensor of one length agree."""
    rng = np.random.default_rng(3)
    rows, width, k, length = 5, 513, 64, 200
    arr = dirty(gen_scores(rng, rows, width, "grid"), lengths=length)
    if form == "none":
        arr = arr[:, :length].copy()
        lengths = None
    elif form == "int":
        lengths = length
    else:
        lengths = lengths_tensor([length] * rows, getattr(torch, form), bk.device)
    check_topk(bk, scores_tensor(arr, torch.float32, bk.device), k, lengths=lengths)


def _starts_values(width):
    return [-7, -1, 0, 1, width // 3, width // 2, width - 1, width, width + 5, 2**31 - 1]


@pytest.mark.parametrize("sdtype", [torch.int32, torch.int64], ids=["int32", "int64"])
@pytest.mark.parametrize("lengths_kind", ["none", "tensor", "int"])
@pytest.mark.parametrize("k", [1, 16, 64, 300])
@pytest.mark.parametrize("width", [65, 1030])
def test_ragged_starts(bk, sdtype, lengths_kind, k, width):
    rng = np.random.default_rng(k * width)
    svals = _starts_values(width)
    rows = len(svals)
    starts = torch.tensor(svals, dtype=sdtype, device=bk.device)
    if lengths_kind == "tensor":
        lvals = [-3, 0, 1, k, width, width // 4, k + 1, 5, 2 * width, 3][:rows]
        lengths = lengths_tensor(lvals, torch.int32, bk.device)
    elif lengths_kind == "int":
        lengths = width // 2 + 3
    else:
        lengths = None
    # Dirty columns before each start and past each row's length.
    arr = dirty(gen_scores(rng, rows, width, "grid"), lengths=lengths, starts=starts)
    for order in ORDERS:
        check_topk(
            bk,
            scores_tensor(arr, torch.bfloat16, bk.device),
            k,
            lengths=lengths,
            starts=starts,
            order=order,
            tie_break=TIES[k % 2],
            thorough=order == "rank",
        )


@pytest.mark.parametrize("scale,offset", [(2, 1), (3, 0), (4, 3), (8, 5)])
@pytest.mark.parametrize("k", [1, 16, 300])
def test_starts_with_shard_view_and_forced(bk, scale, offset, k):
    rng = np.random.default_rng(scale * 100 + k)
    width = 300
    starts = torch.tensor([0, 5, 150, 299, 300, -2], dtype=torch.int32, device=bk.device)
    lengths = lengths_tensor([width * scale, 37, 10**6, 3, 9, -1], torch.int64, bk.device)
    arr = dirty(gen_scores(rng, 6, width, "grid"), lengths=lengths, starts=starts, index_scale=scale, index_offset=offset)
    for fb, fe in [(0, 0), (5, 9), (1000, 0)]:
        check_topk(
            bk,
            scores_tensor(arr, torch.float16, bk.device),
            k,
            lengths=lengths,
            starts=starts,
            index_scale=scale,
            index_offset=offset,
            force_begin=fb,
            force_end=fe,
            order=ORDERS[(k + fb) % 3],
            tie_break=TIES[fe % 2],
            thorough=False,
        )


@pytest.mark.parametrize("scale", [1, 2, 5])
def test_lengths_clamp_in_shard_view(bk, scale):
    """L_r = clamp(lengths, 0, W_r * index_scale): past the buffer is clipped."""
    rng = np.random.default_rng(scale)
    width = 70
    lvals = [-1, 0, 1, width, width * scale - 1, width * scale, width * scale + 1, 2**31 - 1]
    lengths = lengths_tensor(lvals, torch.int32, bk.device)
    arr = dirty(gen_scores(rng, len(lvals), width, "normal"), lengths=lengths, index_scale=scale, index_offset=scale - 1)
    for k in (1, 8, 100):
        check_topk(
            bk, scores_tensor(arr, torch.float32, bk.device), k, lengths=lengths, index_scale=scale, index_offset=scale - 1
        )
