"""GPU checks of the warp-per-row small-k kernel and the warp merge against the
reference backend, on data built to defeat the lane-maximum threshold filter
(one lane holding every large score, exact ties at the threshold, all-equal
rows) so that the exact radix fallback runs, plus every option at the chunk
boundaries. Skips without CUDA; the conformance suite covers the rest."""

import pytest
import torch
from nv_small_k import NV, check_geometry, check_orders, special_rows
from nv_small_k import check as _check
from nv_small_k import plan as _plan

import sparsetopk

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(autouse=True)
def _warp_path(monkeypatch):
    # the shape rule sends few rows to the one-block kernel; force the warp one
    # (the extension reads SPARSETOPK_NV_PATH on every call)
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "warp")


def test_small_k_takes_the_warp_path(monkeypatch):
    monkeypatch.delenv("SPARSETOPK_NV_PATH")
    p = _plan(512, 1344, 16)
    assert p["warp_wpb"] > 0 and p["warp_m"] == 1
    assert _plan(512, 1344, 17)["warp_m"] == 2 and _plan(512, 1344, 32)["warp_m"] == 2
    assert _plan(512, 1344, 33)["warp_m"] == 4 and _plan(512, 1344, 64)["warp_m"] == 4
    assert _plan(512, 1344, 65)["warp_m"] == 8 and _plan(4096, 4096, 160)["warp_m"] == 8
    assert _plan(2048, 1344, 161)["warp_wpb"] > 0 and _plan(512, 2048, 225)["warp_wpb"] == 0
    assert _plan(512, 2048, 161)["warp_m"] == 8 and _plan(4096, 4096, 192)["warp_wpb"] == 3  # 13 KB a warp
    assert _plan(4096, 4096, 160)["warp_wpb"] == 4
    assert _plan(512, 2048, 129)["warp_m"] == 8  # k > 128: 2048+ columns,
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

    def rows_kernel(rows, w, k):
        return _plan(rows, w, k)["warp_wpb"] == 0

    assert not rows_kernel(sms, 1024, 129) and _plan(sms, 672, 224)["warp_wide"] == 2  # up to 1024,
    # and at 1025-2047 columns the rows kernel only on few rows:
    r3, r4, r6 = 3 * sms, 4 * sms, 6 * sms
    assert rows_kernel(r3 - 1, 1025, 224) and rows_kernel(r3 - 1, 2047, 129)  # below 3 x SMs rows any k,
    assert not rows_kernel(r3, 1344, 208) and not rows_kernel(r3, 2047, 224)
    assert rows_kernel(r4 - 1, 2047, 160) and not rows_kernel(r4, 1344, 160)  # k <= 160 below 4 x SMs,
    assert rows_kernel(r6 - 1, 1535, 161) and rows_kernel(r6 - 1, 1025, 207)  # k = 161-207, < 1536 columns,
    assert not rows_kernel(r6, 1344, 176) and not rows_kernel(r3, 1536, 176)  # below 6 x SMs
    assert not rows_kernel(r3, 1344, 128) and not rows_kernel(r6, 1025, 129)
    assert _plan(8, 1344, 16)["warp_wpb"] == 0  # few rows: one block per row
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "block")
    assert _plan(512, 1344, 16)["warp_wpb"] == 0


@pytest.mark.parametrize("k", [1, 2, 16, 31, 32, 33, 63, 64, 65, 100, 128, 129, 150, 160, 161, 192, 193, 224])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_lane_skew_forces_the_fallback(k, dtype):
    # fp32: lane L of a chunk reads columns 4L..4L+3 of every 128; put every
    # large score in lane 0's columns so the k-th lane maximum is low and the
    # survivor buffer (256; 512 at k > 64) overflows
    g = torch.Generator(device="cpu").manual_seed(k)
    rows, width = 8, 16384
    x = torch.randn(rows, width, generator=g)
    cols = torch.arange(width)
    epv = 4 if dtype == torch.float32 else 8
    lane0 = (cols % (32 * epv)) < epv
    x[:, lane0] += 50.0
    x = x.to(dtype).cuda()
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            _check(x, k, order=order, tie_break=tie)


@pytest.mark.parametrize("k", [1, 16, 32, 64, 65, 128, 129, 160, 161, 192, 193, 224])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_ties_and_specials(k, dtype):
    # 16-bit rows take the packed chunk path (max.{b}f16x2 tree, set.ge mask)
    check_orders(special_rows(3000).to(dtype), k)


@pytest.mark.parametrize("k", [1, 16, 32, 48, 64, 96, 128, 144, 160, 176, 192, 208, 224])
def test_threshold_rounds_down(k):
    # fp32 lane values are rounded to bf16 to count the threshold (warp_kth16):
    # the rounding must go down. Every score here sits a few fp32 ulps below
    # the bf16 value 1 + 2^-7, where round-to-nearest (or up) gives a
    # threshold above every score and an empty answer; rounding down gives
    # 1.0, every column survives and the exact fallback ranks them
    g = torch.Generator(device="cpu").manual_seed(k)
    n = torch.randint(1, 7, (6, 4096), generator=g).to(torch.float32)
    x = (1.0 + 2.0**-7) - n * 2.0**-23
    x[1, 100:200] = torch.randn(100, generator=g)  # a few rows with ordinary scores too
    x[2, ::3] = -x[2, ::3]
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            _check(x.cuda(), k, order=order, tie_break=tie)


@pytest.mark.parametrize("width", [2100, 8192, 9233, 40000])
@pytest.mark.parametrize("k", [1, 8, 16, 17, 32, 33, 64, 65, 128, 129, 160, 161, 192, 193, 224])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rows_that_move_the_threshold(k, width, dtype):
    # rows of many chunks that move the chunk threshold in different ways:
    # rising (every chunk raises it and admits many), falling (late chunks
    # skipped), a last chunk no lane wins, a narrow band (16-bit ties at the
    # threshold), plateaus with spikes, +inf and NaN. (Written for a lazy
    # threshold refresh, tried/warp-lazy, which it caught dropping survivors
    # in a mutant; main refreshes every chunk.)
    g = torch.Generator(device="cpu").manual_seed(k * 100003 + width)
    t = torch.linspace(0.0, 1.0, width)
    x = torch.randn(7, width, generator=g)
    x[1] += 12.0 * t  # rising: each chunk's scores beat the bound so far
    x[2] -= 12.0 * t  # falling: late chunks are skipped
    x[3, width - 700 :] = -30.0  # a last chunk that no lane wins
    x[4] = x[4] * 1e-3 + 1.0  # a narrow band: 16-bit ties at the threshold
    x[5] = torch.randint(0, 3, (width,), generator=g).float()
    x[5, ::997] = 5.0  # plateau ties with a few spikes
    x[6, width // 3 :: 1031] = float("inf")
    x[6, width // 2 :: 1301] = float("nan")
    check_orders(x.to(dtype).cuda(), k)


@pytest.mark.parametrize("k", [17, 32, 33, 48, 64, 65, 96, 128, 129, 144, 160, 176, 192, 208, 224])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_share_skew(k, dtype):
    # k > 16 keeps 2, 4 or 8 running maxima a lane, each over its own share of
    # the lane's columns (fp32: column mod 2 or mod 4 of its vector, for 8 the
    # vector's parity too; 16-bit, over all 4 of a lane's vectors: even / odd
    # element positions, for 4 positions {0, 2} {1, 3} {4, 6} {5, 7}, for 8
    # one position). Large scores in one share only: the other
    # shares' maxima stay low, so T is low and many columns survive (the
    # buffer's compaction, or the exact fallback, runs); large scores in
    # every share but one lane: T from few lanes.
    g = torch.Generator(device="cpu").manual_seed(k)
    rows, width = 7, 9000
    x = torch.randn(rows, width, generator=g)
    cols = torch.arange(width)
    x[0, cols % 4 == 0] += 20.0  # fp32 share 0 of 4 (and of 2); 16-bit even columns
    x[1, cols % 2 == 1] += 20.0  # fp32 share 1 of 2; 16-bit odd columns
    x[2, (cols % 1024) < 512] += 20.0  # 16-bit: a lane's vectors 0-1 of a chunk (every share)
    x[3, (cols % 256) < 8] += 20.0  # one lane's columns (16-bit), two lanes' in every other vector (fp32)
    x[3, (cols % 1024) < 256] += 5.0  # 16-bit: vector 0 of each chunk; fp32: vectors 0-1
    x[4] = torch.randint(0, 4, (width,), generator=g).float()  # ties everywhere
    x[5, :] = torch.linspace(-1.0, 1.0, width)  # rising: every chunk raises T
    x[6, cols % 8 == 3] += 20.0  # 16-bit position 3: share 3 of 8, {1, 3} of 4, odd of 2
    check_orders(x.to(dtype).cuda(), k)


@pytest.mark.parametrize("k", [33, 64, 65, 96, 128, 129, 160, 161, 192, 193, 224])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_short_rows_in_a_wide_buffer(k, dtype):
    # A causal prefill's short rows: lengths that end inside a chunk's first
    # vectors (16-bit: 256 columns a vector, fp32: 128), so a lane's later
    # vectors are past the end. Every share must still take columns of the
    # row, and the dirty columns past each length (30, +inf, NaN) must stay
    # out of the share maxima and of the answer. The second copy puts large
    # scores at one element position (one 16-bit share).
    g = torch.Generator(device="cpu").manual_seed(k + 17)
    width = 4096
    cuts = [k - 1, k + 1, 127, 129, 255, 256, 257, 300, 511, 513, 700, 767, 769, 1000]
    x = torch.randn(2 * len(cuts), width, generator=g)
    x[len(cuts) :, torch.arange(width) % 8 == 3] += 20.0
    lengths = torch.tensor(cuts * 2)
    for i, ln in enumerate(lengths.tolist()):
        x[i, ln:] = (30.0, float("inf"), float("nan"))[i % 3]
    x = x.to(dtype).cuda()
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            _check(x, k, order=order, tie_break=tie, lengths=lengths.cuda())


def _ulp_run(n, dtype, g):
    """n consecutive representable values from 1.0 up (each one ulp above the
    last), shuffled: distinct scores that differ in their lowest bit."""
    if dtype == torch.float32:
        bits = 0x3F800000 + torch.randperm(n, generator=g, dtype=torch.int32)
        return bits.view(torch.float32)
    base = 0x3F80 if dtype == torch.bfloat16 else 0x3C00
    bits = (base + torch.randperm(n, generator=g)).to(torch.int16)
    return bits.view(dtype)


@pytest.mark.parametrize("width", [300, 4096])
@pytest.mark.parametrize("k", [33, 48, 64, 65, 96, 118, 127, 128, 129, 144, 150, 160, 161, 176, 192, 193, 208, 224])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_survivor_cut(k, width, dtype):
    # Before the rank the survivors are cut (warp_cut: a threshold key built
    # bit by bit on the score word, then on the tie word of the keys tied at
    # the k-th score): k = 33-64 cuts 65-256 to at most 64 keys, k = 65-128
    # cuts 129-256 to at most 128 (more than 256 are sorted as 512), k =
    # 129-160 cuts 257-512 to at most 256 (sixteen keys a lane), k = 161-224
    # 257-1024 (thirty-two a lane above 512). Rows whose top
    # scores are one ulp apart (the cut must resolve the lowest bit), whose
    # k-th score is tied across more keys than keep - k (the tie words
    # decide), ties that straddle the k-th inside the cut, more than 256
    # survivors (the 512-key sort at k = 65-128, the sixteen-key cut at k >
    # 128, the exact fallback at k <= 64), more than 512 (the thirty-two-key
    # cut at k > 160, the fallback below), scores of both signs, +-0 and NaN
    # among the survivors. Low filler elsewhere.
    g = torch.Generator(device="cpu").manual_seed(k * 7919 + width)
    rows = []

    def row(*parts):
        r = (torch.randn(width, generator=g) - 20.0).to(dtype)
        pos = torch.randperm(width, generator=g)
        at = 0
        for v in parts:
            r[pos[at : at + v.numel()]] = v.to(dtype)
            at += v.numel()
        rows.append(r)

    for n in (80, 129, 200, 250) + ((400, 700, 1000) if width > 400 else ()):
        row(_ulp_run(n, dtype, g))
    big = torch.randn(60, generator=g) + 8.0
    row(big, torch.ones(100))  # 160 score >= 1.0: no threshold keeps k to 128
    row(torch.randn(k - 10, generator=g) + 8.0, torch.ones(20))  # k + 10 score >= 1.0
    row(torch.randn(20, generator=g) + 8.0, torch.ones(80))  # 100 score >= 1.0: the tie words decide at k > 20
    row(torch.randn(200, generator=g), torch.full((width - 200,), float("-inf")))  # both signs survive
    row(torch.randn(100, generator=g) + 8.0, torch.zeros(60), torch.full((60,), -0.0))
    row(torch.randn(50, generator=g) + 8.0, torch.full((150,), float("nan")))
    row(torch.randn(40, generator=g) + 8.0, torch.ones(min(300, width - 40)))
    if width > 1000:
        row(torch.randn(100, generator=g) + 8.0, torch.ones(800))  # 900 survivors, the k-th tied at k > 100
    x = torch.stack(rows)
    check_orders(x.cuda(), k)
    # the same rows cut short by lengths (negative to past the buffer), with
    # scores above all others in the dirty columns past each length
    n = width
    cuts = [n, n - 7, 3 * n // 4, n // 2 + 13, k + 1, k, 1, 0, -3, n + 5, 10**7, n - 1]
    lengths = torch.tensor([cuts[i % len(cuts)] for i in range(x.shape[0])])
    dirty = x.clone()
    for i, ln in enumerate(lengths.tolist()):
        dirty[i, max(ln, 0) :] = 30.0
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            _check(dirty.cuda(), k, order=order, tie_break=tie, lengths=lengths.cuda())


@pytest.mark.parametrize("k", [3, 16, 17, 33, 64, 65, 128, 129, 160, 161, 192, 193, 224])
def test_geometry_at_chunk_edges(k):
    g = torch.Generator(device="cpu").manual_seed(7)
    buf = torch.randn(12, 5000, generator=g).cuda()
    x = buf[:, 3:4099]  # misaligned view, dirty tail, width 4096
    lengths = torch.tensor([-5, 0, 1, k - 1, k, k + 1, 1023, 1024, 1025, 2049, 4096, 10**7], device="cuda")
    starts = torch.tensor([0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 4096], device="cuda")
    check_geometry(x, k, lengths, starts, 3000, 1030, (torch.float32, torch.bfloat16, torch.float16))


def test_forcing_more_than_k():
    x = torch.randn(4, 2500, device="cuda")
    _check(x, 16, force_begin=40)
    _check(x, 16, force_end=40, tie_break="high", order="index")


@pytest.mark.parametrize("R,k_in,k", [(2, 16, 16), (8, 16, 16), (4, 64, 64), (2, 128, 256), (3, 5, 40), (8, 32, 7)])
def test_warp_merge(R, k_in, k):
    g = torch.Generator(device="cpu").manual_seed(R * 1000 + k_in)
    rows = 300
    idx = torch.randint(-1, 400, (rows, R, k_in), generator=g, dtype=torch.int32)
    val = torch.randint(-3, 4, (rows, R, k_in), generator=g).float()  # ties
    val[idx < 0] = float("-inf")
    val[:, 0, 0] = float("nan")
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            a = sparsetopk.merge(idx.cuda(), val.cuda(), k, order=order, tie_break=tie, backend=NV)
            b = sparsetopk.merge(idx.cuda(), val.cuda(), k, order=order, tie_break=tie, backend="reference")
            if order == "any":
                assert torch.equal(torch.sort(a.indices, 1)[0], torch.sort(b.indices, 1)[0])
            else:
                assert torch.equal(a.indices, b.indices)
                assert torch.equal(a.values, b.values)
