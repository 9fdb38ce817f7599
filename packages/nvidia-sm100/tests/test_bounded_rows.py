"""GPU checks of the one-block bounded path for short rows (`resident_bounded`,
k <= 64, a row of at most blockDim x 8 columns), in the tile kernel and in the
rows kernel (SPARSETOPK_NV_PATH=no-tile): a bound on the threads' maxima with
k of them above it (block_bound) bounds the row's k-th score, the columns
above it are ranked by counting. Data here is built to defeat the bound
(every large score in one thread's 8 columns, exact ties at the bound,
all-equal rows, fewer threads holding a column than k) so that the radix
fallback runs, plus every option at the tile edges (forced ranges ending
inside a tile), and dirty columns past each row's length. Against the
reference backend; skips without CUDA."""

import pytest
import torch
from nv_small_k import NV, check_geometry, check_orders, set_path, special_rows
from nv_small_k import check as _check
from nv_small_k import plan as _plan

import sparsetopk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True, params=["block", "block,no-tile"])
def kernel(request, monkeypatch):
    # one block per row for every row count: the tile kernel (default), or
    # the rows kernel's copy of the bounded path
    return set_path(monkeypatch, request.param)


def test_block_size_covers_the_row_in_one_tile(kernel):
    tile = kernel == "block"
    assert _plan(64, 1344, 16)["block"] == 192  # 169 tiles of 8 -> 6 warps
    assert _plan(64, 1344, 16)["tile"] is tile
    assert _plan(64, 100, 16)["block"] == 128
    assert _plan(64, 8184, 64)["block"] == 1024
    assert _plan(64, 8184, 64)["tile"] is tile
    assert _plan(64, 8192, 64)["block"] == 512  # two tiles: radix passes as before
    assert _plan(64, 1344, 65)["block"] == 256  # k > 64: as before
    assert not _plan(64, 8192, 64)["tile"] and not _plan(64, 1344, 65)["tile"]


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


@pytest.mark.parametrize("k", [5, 16, 64])
@pytest.mark.parametrize("misaligned", [False, True])
def test_forced_columns_at_tile_edges(k, misaligned):
    # a tile's columns are read without per-column index arithmetic only when
    # none of them is forced: forced ranges that end inside, at and just past
    # 8-column tiles, under strided index maps, aligned and misaligned rows
    g = torch.Generator(device="cpu").manual_seed(k)
    buf = torch.randn(10, 1400, generator=g).cuda()
    x = buf[:, 3:1347] if misaligned else buf[:, :1344]
    for scale, offset, fb, fe in ((1, 0, 8, 8), (1, 0, 7, 9), (1, 0, 0, 1), (3, 2, 25, 40), (2, 1, 17, 0), (5, 4, 1, 80)):
        for order in ("rank", "index"):
            _check(x, k, lengths=1344 * scale, index_scale=scale, index_offset=offset, force_begin=fb,
                   force_end=fe, order=order)


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
