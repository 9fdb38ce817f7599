"""The custom ops: opcheck, torch.compile, and agreement with eager calls."""

import pytest
import torch

import sparsetopk


def _args(rows=3, width=40, k=5, **kw):
    torch.manual_seed(0)
    s = torch.randn(rows, width)
    a = dict(
        scores=s, k=k, lengths=torch.tensor([40, 7, -2][:rows], dtype=torch.int32), lengths_int=-1,
        starts=None, index_scale=1, index_offset=0, force_begin=1, force_end=2,
        tie_break="low", order="rank", return_values=True, backend="reference",
    )
    a.update(kw)
    return a


@pytest.mark.parametrize("kw", [{}, dict(order="index", tie_break="high"), dict(lengths=None, lengths_int=9, return_values=False)])
def test_opcheck_topk(kw):
    a = _args(**kw)
    torch.library.opcheck(torch.ops.sparsetopk.topk.default, tuple(a.values()))


def test_opcheck_topk_out():
    a = _args()
    a.pop("return_values")
    args = tuple(a.values()) + (torch.empty(3, 5, dtype=torch.int32), torch.empty(3, 5))
    torch.library.opcheck(torch.ops.sparsetopk.topk_out.default, args)


def test_opcheck_merge():
    idx = torch.randint(-1, 50, (4, 3, 6), dtype=torch.int32)
    val = torch.randn(4, 3, 6)
    torch.library.opcheck(torch.ops.sparsetopk.merge.default, (idx, val, 5, "low", "rank", "reference"))
    out = (torch.empty(4, 5, dtype=torch.int32), torch.empty(4, 5))
    torch.library.opcheck(torch.ops.sparsetopk.merge_out.default, (idx, val, 5, "high", "index", "reference") + out)


def test_torch_compile_matches_eager():
    s = torch.randn(6, 100)
    lengths = torch.tensor([100, 50, 3, 0, -4, 999], dtype=torch.int64)

    def f(x, n):
        r = sparsetopk.topk(x * 2.0, 8, lengths=n, force_begin=1, return_values=True)
        return r.indices, r.values

    ci, cv = torch.compile(f, fullgraph=True, backend="eager")(s, lengths)
    ei, ev = f(s, lengths)
    assert torch.equal(ci, ei) and torch.equal(cv, ev)


def test_torch_compile_merge_and_out():
    idx = torch.randint(-1, 50, (4, 2, 6), dtype=torch.int32)
    val = torch.randn(4, 2, 6)

    def f(i, v, oi, ov):
        sparsetopk.merge(i, v, 5, out=(oi, ov))
        return sparsetopk.merge(i, v, 5)

    oi, ov = torch.empty(4, 5, dtype=torch.int32), torch.empty(4, 5)
    r = torch.compile(f, fullgraph=True, backend="eager")(idx, val, oi, ov)
    e = sparsetopk.merge(idx, val, 5)
    assert torch.equal(r.indices, e.indices) and torch.equal(oi, e.indices) and torch.equal(ov, e.values)
