"""Strided row views, ``out=`` tensors, determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conformance_support import (
    DTYPES,
    ORDERS,
    TIES,
    TRACK,
    assert_bitwise_same,
    assert_result_equal,
    check_merge,
    check_topk,
    gen_scores,
    ids,
    lengths_tensor,
    oracle_topk,
    require_topk,
    scores_tensor,
    topk_served,
)

import sparsetopk


def _views(big: torch.Tensor, width: int):
    """Row views with inner stride 1 and unusual row strides / offsets."""
    rows = big.shape[0]
    yield "prefix", big[:, :width]  # row stride = wider buffer's width
    yield "offset3", big[:, 3 : 3 + width]  # misaligned start
    yield "every-other-row", big[::2, :width]
    # transposed-then-sliced: [A, rows, W] -> [rows, A, W] -> pick one A
    buf = big.reshape(rows, 1, -1).expand(rows, 3, big.shape[1]).contiguous().transpose(0, 1).contiguous().transpose(0, 1)
    yield "transposed-sliced", buf[:, 1, 5 : 5 + width]


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("width,k", [(33, 7), (768, 64), (2049, 300), (8200, 2048)])
def test_strided_row_views(bk, dtype, width, k):
    rng = np.random.default_rng(width)
    rows = 6
    wide = width + 41
    big_np = gen_scores(rng, rows, wide, "grid")
    big_np[:, width + 3 :] = np.nan  # past the view (beyond `offset3`'s window too)
    big = scores_tensor(big_np, dtype, bk.device)
    snapshot = big.clone()
    for name, view in _views(big, width):
        assert view.stride(1) == 1 and view.stride(0) > width
        r = view.shape[0]
        lengths = lengths_tensor(list(range(width - r + 1, width + 1)), torch.int32, bk.device)
        for order in ORDERS:
            check_topk(
                bk,
                view,
                k,
                lengths=lengths,
                order=order,
                tie_break=TIES[len(name) % 2],
                ctx=f"view {name} order={order}",
                thorough=order == "rank",
            )
    assert torch.equal(
        big.view(torch.int16) if big.element_size() == 2 else big.view(torch.int32),
        snapshot.view(torch.int16) if big.element_size() == 2 else snapshot.view(torch.int32),
    ), "buffer modified"


@pytest.mark.parametrize("return_values", [True, False])
@pytest.mark.parametrize("order", ORDERS)
def test_out_tensors(bk, return_values, order):
    rng = np.random.default_rng(2)
    rows, width, k = 5, 1000, 64
    scores = scores_tensor(gen_scores(rng, rows, width, "grid"), torch.float32, bk.device)
    lengths = lengths_tensor([0, 3, 64, 500, 1000], torch.int64, bk.device)
    require_topk(bk, scores, k, lengths=lengths, order=order)
    exp_i, exp_v = oracle_topk(scores, k, lengths=lengths, order=order)
    oi = torch.full((rows, k), 12345, dtype=torch.int32, device=bk.device)
    ov = torch.full((rows, k), 7.0, dtype=torch.float32, device=bk.device)
    out = (oi, ov) if return_values else oi
    res = sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=return_values, out=out, backend=bk.name)
    assert res.indices.data_ptr() == oi.data_ptr(), "topk did not write into out indices"
    if return_values:
        assert res.values.data_ptr() == ov.data_ptr(), "topk did not write into out values"
        assert_result_equal(oi.cpu().numpy(), ov.cpu().numpy(), exp_i, exp_v, order, "out=")
    else:
        assert res.values is None
        assert_result_equal(oi.cpu().numpy(), None, exp_i, exp_v, order, "out=")
    # A second call into the same out tensors gives the same bits.
    again = sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=True, backend=bk.name)
    assert torch.equal(again.indices, oi)


def test_out_pair_without_values_requested(bk):
    """out=(indices, values) with return_values=False: indices are right."""
    rng = np.random.default_rng(3)
    scores = scores_tensor(gen_scores(rng, 3, 100, "normal"), torch.float32, bk.device)
    require_topk(bk, scores, 10)
    oi = torch.full((3, 10), -7, dtype=torch.int32, device=bk.device)
    ov = torch.zeros((3, 10), dtype=torch.float32, device=bk.device)
    res = sparsetopk.topk(scores, 10, out=(oi, ov), backend=bk.name)
    exp_i, _ = oracle_topk(scores, 10)
    assert res.indices.data_ptr() == oi.data_ptr()
    assert_result_equal(oi.cpu().numpy(), None, exp_i, None, "rank", "out pair")


def test_merge_out(bk):
    rng = np.random.default_rng(4)
    idx = torch.from_numpy(rng.integers(-1, 50, size=(4, 3, 16)).astype(np.int32)).to(bk.device)
    val = torch.from_numpy((rng.integers(0, 5, size=(4, 3, 16)) / 2).astype(np.float32)).to(bk.device)
    # same index -> same value, as topk of shards produces
    val = torch.where(idx >= 0, (idx % 7).to(torch.float32), torch.full_like(val, float("-inf")))
    check_merge(bk, idx, val, 20)
    oi = torch.full((4, 20), 99, dtype=torch.int32, device=bk.device)
    ov = torch.full((4, 20), 3.0, dtype=torch.float32, device=bk.device)
    res = sparsetopk.merge(idx, val, 20, out=(oi, ov), backend=bk.name)
    assert res.indices.data_ptr() == oi.data_ptr() and res.values.data_ptr() == ov.data_ptr()
    ref = sparsetopk.merge(idx, val, 20, backend=bk.name)
    assert_bitwise_same(res, ref, "merge out=")


@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("order", ORDERS)
def test_determinism_repeated_calls(bk, dtype, order):
    """The same inputs give bit-identical outputs, call after call (also from a
    fresh copy of the inputs at another address)."""
    rng = np.random.default_rng(8)
    arr = np.concatenate([gen_scores(rng, 2, 4100, "band"), gen_scores(rng, 2, 4100, "specials")])
    scores = scores_tensor(arr, dtype, bk.device)
    lengths = lengths_tensor([4100, 4000, 2048, 17], torch.int32, bk.device)
    for k in (16, 300):
        if not topk_served(bk, scores, k, lengths=lengths, order=order):
            continue
        TRACK.checks += 1
        first = sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=True, backend=bk.name)
        for _ in range(4):
            again = sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=True, backend=bk.name)
            assert_bitwise_same(first, again, f"k={k} order={order}")
        copy = scores.clone()
        assert_bitwise_same(
            first, sparsetopk.topk(copy, k, lengths=lengths.clone(), order=order, return_values=True, backend=bk.name), "copy"
        )


@pytest.mark.parametrize("order", ORDERS)
def test_torch_compile(bk, order):
    """SPEC §3: topk and merge work under torch.compile (fullgraph, through the
    registered custom ops) and give the eager answer."""
    rng = np.random.default_rng(6)
    rows, width, k = 4, 700, 32
    scores = scores_tensor(gen_scores(rng, rows, width, "grid"), torch.bfloat16, bk.device)
    lengths = lengths_tensor([700, 300, 31, 0], torch.int32, bk.device)
    require_topk(bk, scores, k, lengths=lengths, order=order, force_end=4)

    def fn(s, n):
        a = sparsetopk.topk(s, k, lengths=n, order=order, force_end=4, return_values=True, backend=bk.name)
        b = sparsetopk.topk(s, k, lengths=n, index_scale=2, index_offset=1, return_values=True, backend=bk.name)
        m = sparsetopk.merge(torch.stack([a.indices, b.indices], 1), torch.stack([a.values, b.values], 1), k, backend=bk.name)
        return a.indices, a.values, m.indices, m.values

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True)
    got = compiled(scores, lengths)
    want = fn(scores, lengths)
    exp_i, exp_v = oracle_topk(scores, k, lengths=lengths, order=order, force_end=4)
    assert_result_equal(got[0].cpu().numpy(), got[1].cpu().numpy(), exp_i, exp_v, order, "compiled topk")
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g.view(torch.int32), w.view(torch.int32)), "compiled != eager"
