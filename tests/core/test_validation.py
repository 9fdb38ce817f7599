"""SPEC §4: every bad argument is a ValueError/TypeError naming the argument,
and nothing is written on error."""

import pytest
import torch

import sparsetopk

S = torch.randn(4, 32)


def _call(**kw):
    args = dict(scores=S, k=4)
    args.update(kw)
    return sparsetopk.topk(args.pop("scores"), args.pop("k"), **args)


@pytest.mark.parametrize(
    "kw, exc, needle",
    [
        (dict(scores=torch.randn(32)), ValueError, "scores"),
        (dict(scores=torch.randn(2, 3, 4)), ValueError, "scores"),
        (dict(scores=torch.randn(4, 32, dtype=torch.float64)), TypeError, "scores"),
        (dict(scores=torch.randint(0, 9, (4, 32))), TypeError, "scores"),
        (dict(scores=[[1.0, 2.0]]), TypeError, "scores"),
        (dict(scores=torch.randn(32, 4).t()), ValueError, "inner stride"),
        (dict(k=0), ValueError, "k"),
        (dict(k=-3), ValueError, "k"),
        (dict(k=2.0), TypeError, "k"),
        (dict(k=True), TypeError, "k"),
        (dict(k=2**31), ValueError, "k"),
        (dict(lengths=torch.ones(3, dtype=torch.int32)), ValueError, "lengths"),
        (dict(lengths=torch.ones(4, 1, dtype=torch.int32)), ValueError, "lengths"),
        (dict(lengths=torch.ones(4)), TypeError, "lengths"),
        (dict(lengths=1.5), TypeError, "lengths"),
        (dict(starts=torch.zeros(5, dtype=torch.int64)), ValueError, "starts"),
        (dict(starts=torch.zeros(4, dtype=torch.int16)), TypeError, "starts"),
        (dict(force_begin=-1), ValueError, "force_begin"),
        (dict(force_end=-2), ValueError, "force_end"),
        (dict(index_scale=0), ValueError, "index_scale"),
        (dict(index_scale=2, index_offset=2), ValueError, "index_offset"),
        (dict(index_offset=-1), ValueError, "index_offset"),
        (dict(index_scale=2**27), ValueError, "int32"),
        (dict(tie_break="lowest"), ValueError, "tie_break"),
        (dict(order="sorted"), ValueError, "order"),
        (dict(return_values=1), TypeError, "return_values"),
        (dict(backend="no-such-backend"), ValueError, "no-such-backend"),
        (dict(backend=3), TypeError, "backend"),
        (dict(out=torch.empty(4, 5, dtype=torch.int32)), ValueError, "out"),
        (dict(out=torch.empty(4, 4, dtype=torch.int64)), TypeError, "out"),
        (dict(out=torch.empty(4, 8, dtype=torch.int32)[:, ::2]), ValueError, "contiguous"),
        (dict(out=torch.empty(4, 4, dtype=torch.int32), return_values=True), ValueError, "out"),
        (dict(out=(torch.empty(4, 4, dtype=torch.int32), torch.empty(4, 4, dtype=torch.float64)), return_values=True), TypeError, "out values"),
        (dict(out="nope"), TypeError, "out"),
    ],
)
def test_bad_arguments_name_the_argument(kw, exc, needle):
    with pytest.raises(exc) as ei:
        _call(**kw)
    assert needle in str(ei.value)


def test_error_leaves_out_untouched():
    idx = torch.full((4, 4), 123, dtype=torch.int32)
    val = torch.full((4, 4), 7.0)
    with pytest.raises(ValueError):
        sparsetopk.topk(S, 4, order="bogus", out=(idx, val), return_values=True)
    with pytest.raises(ValueError):
        sparsetopk.topk(S, 4, lengths=torch.ones(9, dtype=torch.int32), out=(idx, val), return_values=True)
    assert (idx == 123).all() and (val == 7.0).all()


@pytest.mark.parametrize(
    "kw, exc, needle",
    [
        (dict(indices=torch.zeros(2, 3, dtype=torch.int32)), ValueError, "indices"),
        (dict(indices=torch.zeros(2, 3, 4, dtype=torch.int64)), TypeError, "indices"),
        (dict(values=torch.zeros(2, 3, 4, dtype=torch.float16)), TypeError, "values"),
        (dict(values=torch.zeros(2, 3, 5)), ValueError, "values"),
        (dict(k=0), ValueError, "k"),
        (dict(tie_break="x"), ValueError, "tie_break"),
        (dict(order="x"), ValueError, "order"),
        (dict(out=torch.empty(2, 4, dtype=torch.int32)), ValueError, "out"),
    ],
)
def test_merge_bad_arguments(kw, exc, needle):
    args = dict(indices=torch.zeros(2, 3, 4, dtype=torch.int32), values=torch.zeros(2, 3, 4), k=4)
    args.update(kw)
    with pytest.raises(exc) as ei:
        sparsetopk.merge(args.pop("indices"), args.pop("values"), args.pop("k"), **args)
    assert needle in str(ei.value)


def test_int32_overflow_boundary():
    # width * scale - 1 is the largest global index; it must fit int32 (-1 reserved)
    s = torch.empty(1, 2, dtype=torch.float32)
    with pytest.raises(ValueError, match="int32"):
        sparsetopk.topk(s, 1, index_scale=2**30)
    sparsetopk.topk(s, 1, index_scale=2**30 - 1, index_offset=5)


def test_empty_shapes():
    r = sparsetopk.topk(torch.empty(0, 8), 3, return_values=True)
    assert r.indices.shape == (0, 3) and r.values.shape == (0, 3)
    r = sparsetopk.topk(torch.empty(2, 0), 3, return_values=True)
    assert (r.indices == -1).all() and torch.isneginf(r.values).all()
    r = sparsetopk.merge(torch.empty(2, 0, 4, dtype=torch.int32), torch.empty(2, 0, 4), 3)
    assert (r.indices == -1).all()
