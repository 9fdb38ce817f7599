"""GPU checks of the one-block kernel's bounded path for short rows
(`resident_bounded`, k <= 64, a row of at most blockDim x 8 columns): a bound
on the threads' maxima with k of them above it (block_bound) bounds the row's
k-th score, the columns above it are ranked by counting. Data here is built to
defeat the bound (every large score in one thread's 8 columns, exact ties at
the bound, all-equal rows, fewer threads holding a column than k) so that the
radix fallback runs, plus every option at the tile edges, and dirty columns
past each row's length. Against the reference backend; skips without CUDA."""

import pytest
import torch
from nv_small_k import NV, check_geometry, check_orders, special_rows
from nv_small_k import check as _check
from nv_small_k import plan as _plan

import sparsetopk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _block_path(monkeypatch):
    # one block per row for every row count (the extension reads this on every call)
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "block")


def test_block_size_covers_the_row_in_one_tile():
    assert _plan(64, 1344, 16)["block"] == 192  # 169 tiles of 8 -> 6 warps
    assert _plan(64, 100, 16)["block"] == 128
    assert _plan(64, 8184, 64)["block"] == 1024
    assert _plan(64, 8192, 64)["block"] == 512  # two tiles: radix passes as before
    assert _plan(64, 1344, 65)["block"] == 256  # k > 64: as before


@pytest.mark.parametrize("k", [1, 2, 16, 31, 32, 33, 64])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_thread_skew_defeats_the_bound(k, dtype):
    # thread t holds columns 8t..8t+7 (aligned rows): put the large scores in
    # a few threads' columns so few threads carry them and the bound is low
    g = torch.Generator(device="cpu").manual_seed(k)
    rows, width = 6, 1344
    x = torch.randn(rows, width, generator=g)
    x[0, :8] += 50.0  # one thread: bound far below, every column survives -> fallback
    x[1, 8:24] += 50.0  # two threads
    x[2, ::8] += 50.0  # one column in every thread: the bound is tight
    x[3, : 8 * k] += 50.0  # k threads' worth
    x = x.to(dtype).cuda()
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            _check(x, k, order=order, tie_break=tie)


@pytest.mark.parametrize("k", [1, 16, 32, 64])
@pytest.mark.parametrize("width", [1344, 2000, 8184])
def test_ties_and_specials(k, width):
    check_orders(special_rows(width, band=True), k)


@pytest.mark.parametrize("k", [3, 16, 64])
def test_lengths_starts_and_alignment(k):
    g = torch.Generator(device="cpu").manual_seed(11)
    buf = torch.randn(14, 3000, generator=g).cuda()
    x = buf[:, 3:1347]  # misaligned view (alignment head), dirty tail, width 1344
    lengths = torch.tensor([-5, 0, 1, k - 1, k, k + 1, 8 * k - 1, 8 * k + 1, 100, 1023, 1343, 1344, 1345, 10**7],
                           device="cuda")
    starts = torch.tensor([0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 1344], device="cuda")
    check_geometry(x, k, lengths, starts, 1000, 70, (torch.float32, torch.bfloat16, torch.float16))


def test_short_rows_fewer_threads_than_k():
    # width 40: five threads hold columns, k = 32 > 5 -> no bound, every column ranked
    x = torch.randn(9, 40, device="cuda")
    for k in (6, 32, 39):
        _check(x, k)
        _check(x, k, order="index", tie_break="high")


def test_repeat_is_bit_identical():
    x = torch.randint(0, 4, (64, 1344), device="cuda").float()  # heavy ties
    a = sparsetopk.topk(x, 16, backend=NV, return_values=True)
    for _ in range(5):
        b = sparsetopk.topk(x, 16, backend=NV, return_values=True)
        assert torch.equal(a.indices, b.indices) and torch.equal(a.values, b.values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dirty_tail_never_matters(dtype):
    # columns past each row's length (+inf / NaN here, which would win) are
    # never selected
    g = torch.Generator(device="cpu").manual_seed(5)
    rows, width = 24, 1344
    x = torch.randn(rows, width, generator=g)
    lengths = torch.randint(-3, width + 50, (rows,), generator=g)
    lengths[:4] = torch.tensor([17, 16, 1, 1337])
    for r, n in enumerate(lengths.tolist()):
        x[r, max(n, 0):] = float("inf") if r % 2 else float("nan")
    x = x.to(dtype).cuda()
    for k in (16, 64):
        for order in ("rank", "index"):
            _check(x, k, lengths=lengths.cuda(), order=order)
            _check(x, k, lengths=lengths.cuda().to(torch.int32), order=order, tie_break="high")
