"""GPU checks of the one-block kernel's bounded path for short rows
(`resident_bounded`, k <= 64, a row of at most blockDim x 8 columns): the
k-th largest thread maximum bounds the row's k-th score, the columns above it
are ranked by counting. Data here is built to defeat the bound (every large
score in one thread's 8 columns, exact ties at the bound, all-equal rows, fewer
threads holding a column than k) so that the radix fallback runs, plus every
option at the tile edges. Against the reference backend; skips without CUDA."""

import pytest
import torch

import sparsetopk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

NV = "nvidia-sm100"


@pytest.fixture(autouse=True)
def _block_path(monkeypatch):
    # one block per row for every row count (the extension reads this on every call)
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "block")


def _plan(rows, width, k):
    from sparsetopk_nvidia_sm100 import _backend

    return _backend._ext().plan(rows, width, k, torch.cuda.current_device())


def _check(x, k, **kw):
    a = sparsetopk.topk(x, k, backend=NV, return_values=True, **kw)
    b = sparsetopk.topk(x, k, backend="reference", return_values=True, **kw)
    if kw.get("order", "rank") == "any":
        assert torch.equal(torch.sort(a.indices, 1)[0], torch.sort(b.indices, 1)[0])
    else:
        assert torch.equal(a.indices, b.indices)
        assert torch.equal(a.values, b.values)


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
    dev = "cuda"
    rows = 7
    x = torch.zeros(rows, width, device=dev)  # all equal (also -0 vs +0 below)
    x[1] = -0.0
    x[1, ::7] = 0.0
    x[2] = float("nan")
    x[2, 100:110] = float("-inf")
    x[3] = torch.randint(0, 3, (width,), device=dev).float()  # plateau ties at the bound
    x[4] = float("inf")
    x[4, 5] = float("nan")
    x[5] = torch.arange(width, device=dev).float()  # sorted ascending
    x[6] = torch.randn(width, device=dev) * 1e-3 + 1.0  # narrow band
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            _check(x, k, order=order, tie_break=tie)
            _check(x.flip(1).contiguous(), k, order=order, tie_break=tie)


@pytest.mark.parametrize("k", [3, 16, 64])
def test_lengths_starts_and_alignment(k):
    g = torch.Generator(device="cpu").manual_seed(11)
    buf = torch.randn(14, 3000, generator=g).cuda()
    x = buf[:, 3:1347]  # misaligned view (alignment head), dirty tail, width 1344
    lengths = torch.tensor([-5, 0, 1, k - 1, k, k + 1, 8 * k - 1, 8 * k + 1, 100, 1023, 1343, 1344, 1345, 10**7],
                           device="cuda")
    for kw in (
        {"lengths": lengths},
        {"lengths": lengths.to(torch.int32),
         "starts": torch.tensor([0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 1344], device="cuda")},
        {"lengths": 1000, "index_scale": 3, "index_offset": 2},
        {"lengths": lengths, "force_begin": 2, "force_end": 3},
        {"force_begin": 70, "force_end": 5},
    ):
        for order in ("rank", "index"):
            _check(x, k, order=order, **kw)
            _check(x.to(torch.bfloat16), k, order=order, **kw)
            _check(x.to(torch.float16), k, order=order, **kw)


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
