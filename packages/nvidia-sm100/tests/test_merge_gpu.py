"""GPU checks of the block merge (bucket merge, its in-kernel bitonic fallback
for skewed indices, and the legacy bitonic kernel via
SPARSETOPK_NV_PATH=legacy-merge) against the reference backend: R in
{1, 2, 3, 4, 8}, k_in up to 2048, k up to 4096 (also k > R * k_in),
duplicate indices across and within lists (equal and different values),
NaN / +-inf / +-0 values, -1 padding, every order and tie rule, 1..300 rows,
and bit-identical repeats (order "any" included). Skips without CUDA."""

import pytest
import torch
from nv_small_k import set_path

import sparsetopk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

NV = "nvidia-sm100"
ORDERS = ("rank", "index", "any")
TIES = ("low", "high")


@pytest.fixture(params=["auto", "legacy-merge"])
def path(request, monkeypatch):
    return set_path(monkeypatch, request.param)


def _check(idx, val, k, order, tie):
    idx, val = idx.cuda(), val.cuda()
    a = sparsetopk.merge(idx, val, k, order=order, tie_break=tie, backend=NV)
    b = sparsetopk.merge(idx, val, k, order=order, tie_break=tie, backend="reference")
    if order == "any":
        # same set; valid slots first, padding last
        sa, pa = torch.sort(a.indices, 1)
        sb, pb = torch.sort(b.indices, 1)
        assert torch.equal(sa, sb)
        assert torch.equal(torch.gather(a.values, 1, pa), torch.gather(b.values, 1, pb))
        nvalid = (b.indices >= 0).sum(1, keepdim=True)
        pos = torch.arange(k, device=a.indices.device).expand_as(a.indices)
        assert torch.equal(a.indices >= 0, pos < nvalid)
    else:
        assert torch.equal(a.indices, b.indices)
        assert torch.equal(a.values, b.values)
    # deterministic: a second call is bit-identical, whatever the order
    a2 = sparsetopk.merge(idx, val, k, order=order, tie_break=tie, backend=NV)
    assert torch.equal(a.indices, a2.indices)
    assert torch.equal(a.values.view(torch.int32), a2.values.view(torch.int32))


def _shard_lists(rows, R, k_in, gen, pad_frac=0.25):
    """Disjoint sharded lists (index = j * R + s), random order, some -1 padding."""
    gaps = torch.randint(1, 8, (rows, R, k_in), generator=gen)
    j = torch.cumsum(gaps, 2)
    idx = (j * R + torch.arange(R).view(1, R, 1)).to(torch.int32)
    val = torch.randn(rows, R, k_in, generator=gen)
    perm = torch.argsort(torch.rand(rows, R, k_in, generator=gen), 2)
    idx, val = torch.gather(idx, 2, perm), torch.gather(val, 2, perm)
    npad = int(k_in * pad_frac)
    if npad:
        idx[1::2, R - 1, k_in - npad:] = -1
        val[1::2, R - 1, k_in - npad:] = float("-inf")
    return idx, val


def _specials(val, gen):
    """Sprinkle NaN, +-inf, +-0 into val (in place)."""
    r = torch.rand(val.shape, generator=gen)
    val[r < 0.02] = float("nan")
    val[(r >= 0.02) & (r < 0.04)] = float("inf")
    val[(r >= 0.04) & (r < 0.06)] = float("-inf")
    val[(r >= 0.06) & (r < 0.08)] = 0.0
    val[(r >= 0.08) & (r < 0.10)] = -0.0
    return val


@pytest.mark.parametrize("R", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("k_in,k", [(2048, 2048), (2048, 64), (1000, 4096), (300, 257), (129, 300)])
def test_shards(path, R, k_in, k):
    gen = torch.Generator().manual_seed(R * 7919 + k_in + k)
    idx, val = _shard_lists(5, R, k_in, gen)
    for order in ORDERS:
        for tie in TIES:
            _check(idx, val, k, order, tie)


@pytest.mark.parametrize("R,k_in,k", [(2, 2048, 2048), (4, 1024, 2048), (8, 2048, 4096), (3, 700, 1500),
                                      (1, 2048, 100), (8, 64, 256)])
def test_duplicates_and_specials(path, R, k_in, k):
    # indices drawn from a small range: many duplicates across and within
    # lists, with equal values (copied) and different values
    gen = torch.Generator().manual_seed(R * 31 + k_in)
    rows = 6
    n = R * k_in
    idx = torch.randint(-1, max(2, n // 3), (rows, R, k_in), generator=gen, dtype=torch.int32)
    val = torch.randn(rows, R, k_in, generator=gen)
    # same index, same value: copy list 0's pairs into another list
    if R > 1:
        idx[0, R - 1] = idx[0, 0]
        val[0, R - 1] = val[0, 0]
    # duplicates inside one list with different values
    idx[1, 0, 1::2] = idx[1, 0, 0::2][: idx[1, 0, 1::2].numel()]
    # plateau: few distinct values, exact ties decided by the tie rule
    val[2] = torch.randint(-2, 3, (R, k_in), generator=gen).float()
    _specials(val, gen)
    val[3] = float("nan")  # all NaN (== -inf)
    val[4] = 0.0
    val[4, :, ::3] = -0.0  # -0 == +0
    val[idx < 0] = float("-inf")
    for order in ORDERS:
        for tie in TIES:
            _check(idx, val, k, order, tie)


@pytest.mark.parametrize("rows", [1, 2, 16, 131, 300])
def test_rows(path, rows):
    gen = torch.Generator().manual_seed(rows)
    idx, val = _shard_lists(rows, 4, 512, gen)
    _specials(val, gen)
    for order in ORDERS:
        _check(idx, val, 1024, order, "low")
    _check(idx, val, 2048, "rank", "high")  # k == R * k_in


def test_padding_and_empty_rows(path):
    gen = torch.Generator().manual_seed(5)
    idx, val = _shard_lists(4, 4, 2048, gen)
    idx[0] = -1  # no valid candidate at all
    val[0] = float("-inf")
    idx[1, :, 10:] = -1  # 40 valid candidates, k = 2048
    val[1, :, 10:] = float("-inf")
    idx[2, :, :] = 7  # one index everywhere
    for order in ORDERS:
        for tie in TIES:
            _check(idx, val, 2048, order, tie)


@pytest.mark.parametrize("R,k_in", [(2, 2048), (8, 2048), (4, 100)])
def test_skewed_indices_take_the_fallback(path, R, k_in):
    # clustered indices plus far outliers: the index-range buckets pile up,
    # so the bucket merge falls back to its bitonic sort (exact)
    gen = torch.Generator().manual_seed(R + k_in)
    rows = 3
    idx = torch.randint(0, 3 * k_in, (rows, R, k_in), generator=gen, dtype=torch.int32)
    idx[:, 0, 0] = 2**31 - 2
    idx[1, :, 5] = 10**9
    val = torch.randn(rows, R, k_in, generator=gen)
    for order in ORDERS:
        for tie in TIES:
            _check(idx, val, 2048, order, tie)


def test_composition_law(path):
    # merge(topk(shard_s)) == topk(global) for the sharded views of one row
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(8, 40000, generator=gen).cuda()
    x[:, 100:200] = 1.5  # ties across shards
    for R in (1, 2, 3, 4, 8):
        for k in (300, 2048):
            parts = [sparsetopk.topk(x[:, s::R].contiguous(), k, index_scale=R, index_offset=s, lengths=40000,
                                     return_values=True, order="any", backend="reference") for s in range(R)]
            ii = torch.stack([p.indices for p in parts], 1)
            vv = torch.stack([p.values for p in parts], 1)
            for order in ORDERS:
                m = sparsetopk.merge(ii, vv, k, order=order, backend=NV)
                t = sparsetopk.topk(x, k, order=order, return_values=True, backend="reference")
                if order == "any":
                    assert torch.equal(torch.sort(m.indices, 1)[0], torch.sort(t.indices, 1)[0])
                else:
                    assert torch.equal(m.indices, t.indices)
                    assert torch.equal(m.values, t.values)


def test_repeat_is_bit_identical_under_load(path):
    # many identical calls in a row (atomics race differently each time)
    gen = torch.Generator().manual_seed(3)
    idx, val = _shard_lists(16, 8, 2048, gen)
    idx[:, 1, :512] = idx[:, 0, :512]  # cross-list duplicates, same values
    val[:, 1, :512] = val[:, 0, :512]
    idx, val = idx.cuda(), val.cuda()
    for order in ORDERS:
        ref = sparsetopk.merge(idx, val, 2048, order=order, backend=NV)
        for _ in range(20):
            m = sparsetopk.merge(idx, val, 2048, order=order, backend=NV)
            assert torch.equal(m.indices, ref.indices)
            assert torch.equal(m.values.view(torch.int32), ref.values.view(torch.int32))


def test_unknown_path_token_is_an_error(monkeypatch):
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "legacy-merge,nonsense")
    idx = torch.zeros(1, 2, 300, dtype=torch.int32, device="cuda")
    val = torch.zeros(1, 2, 300, device="cuda")
    with pytest.raises(Exception, match="nonsense"):
        sparsetopk.merge(idx, val, 300, backend=NV)
