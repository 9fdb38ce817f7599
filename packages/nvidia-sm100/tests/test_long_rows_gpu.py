"""GPU tests of the long-row paths of nvidia-sm100, each forced through
SPARSETOPK_NV_PATH (read by the extension on every call), against the
``reference`` backend, with data built to hit the fallbacks:

- one-block streamed rows with the one-read online gather ("stream,online": no row
  stays resident, so short rows take it too), and its overflow fallback
  (narrow bands, all-equal rows, sorted rows, blocky rows);
- the two-read multi-pass streamed select ("stream,no-online");
- the sampled split path ("split": sample + balanced gather + final, whose
  select finds the k-th candidate from counts of their bins; by radix passes
  over the candidates with "split,no-chist"; the sample's estimate by two
  radix passes, not one binned pass, with "split,sample22"; the chunked gather with
  "split,no-balanced"), and its
  fallbacks (fewer than k keys >= the estimate cannot happen by construction
  of the data here, but segment overflow and > cand_cap candidates do:
  blocky and band rows);
- the legacy split path ("split,legacy-split"), and the automatic choice;
- the sampled-rows kernel ("rows,sampled-rows": one 256-thread block per
  row, sample -> estimate -> one-read gather by warp spans, the block gather
  when a warp's span overflows (blocky rows), and the exact streamed select
  when the candidates overflow or number < k (band, const); the k-th
  candidate from counts of their bins, or by radix passes over them where
  the sample gave no bins ("sample22") or the k-th key's bin is open or
  crowded, and by select_passes + finish with "no-rbin"; the candidates read
  in place in the warps' regions, or packed first with "no-wreg"; with "estk" (and by
  default where rows have starts or the buffer is <= 64K wide) rows of a
  one-run sample take their estimate from sampled_est_kernel, launched
  first, and "no-estk" samples them in the kernel);
- the cluster kernel ("cluster", "cluster=N": one thread-block cluster of N
  blocks per row, N = 1..16, not only powers of two): resident rows,
  streamed rows (rows longer than N x ~46K columns: sample, one-read gather,
  select on the candidates), and the exact fallback when candidates overflow
  (band, const, blocky).

Skipped without a usable CUDA device.
"""

from __future__ import annotations

import math
import zlib

import pytest
import torch
from nv_usable import usable

import sparsetopk

BK = "nvidia-sm100"


pytestmark = pytest.mark.skipif(not usable(), reason="needs a CUDA device and the nvidia-sm100 backend")

PATHS = ["auto", "stream,online", "stream,no-online", "split", "split,legacy-split", "rows", "no-cluster",
         "cluster=1", "cluster=16", "split,legacy-gather", "cluster=3", "rows,sampled-rows",
         "rows,sampled-rows,block-gather", "rows,sampled-rows,sruns=1", "rows,sampled-rows,sample22", "rows,sampled-rows,no-rbin",
         "rows,sampled-rows,no-wreg", "rows,sampled-rows,estk", "rows,sampled-rows,no-estk",
         "rows,sampled-rows,sruns=4,sruns-fixed", "cluster=3,no-cspan", "split,no-pdl",
         "split,no-balanced", "split,no-cspan", "split,no-chist", "split,sample22"]
KINDS = ["normal", "sorted", "sorted_desc", "band", "const", "specials", "blocky", "band_bf16ties"]


def _data(kind: str, rows: int, width: int, dtype, g: torch.Generator) -> torch.Tensor:
    if kind == "normal":
        x = torch.randn(rows, width, generator=g)
    elif kind == "sorted":
        x = torch.sort(torch.randn(rows, width, generator=g), dim=1).values
    elif kind == "sorted_desc":
        x = torch.sort(torch.randn(rows, width, generator=g), dim=1, descending=True).values
    elif kind == "band":
        # thousands of values within a few ulps of 1.0: the threshold bin holds
        # most of the row (candidate buffers overflow)
        if dtype == torch.float32:
            b = torch.randint(0, 5, (rows, width), generator=g, dtype=torch.int32) + 0x3F800000
            return b.view(torch.float32)
        b = torch.randint(0, 3, (rows, width), generator=g, dtype=torch.int16)
        base = 0x3F80 if dtype == torch.bfloat16 else 0x3C00
        return (b + base).view(dtype)
    elif kind == "band_bf16ties":
        # max-pooled-logit-like band: many exact ties after rounding
        x = torch.randn(rows, width, 8, generator=g).amax(-1)
        x = x.to(torch.bfloat16).float()
    elif kind == "const":
        x = torch.full((rows, width), 0.75)
    elif kind == "specials":
        x = torch.randn(rows, width, generator=g)
        sel = torch.randint(0, 10, (rows, width), generator=g)
        x = torch.where(sel == 0, torch.full_like(x, math.nan), x)
        x = torch.where(sel == 1, torch.full_like(x, math.inf), x)
        x = torch.where(sel == 2, torch.full_like(x, -math.inf), x)
        x = torch.where(sel == 3, torch.full_like(x, -0.0), x)
        x = torch.where(sel == 4, torch.full_like(x, 0.0), x)
    elif kind == "blocky":
        # every top-k key in one contiguous run: one split chunk gets them all
        x = torch.randn(rows, width, generator=g)
        a, n = width // 3, min(width - width // 3, 6000)
        x[:, a : a + n] = 100.0 + torch.randn(rows, n, generator=g) * 1e-3
    else:
        raise ValueError(kind)
    return x.to(dtype)


def _dirty(x: torch.Tensor, lengths, g: torch.Generator) -> torch.Tensor:
    """Columns at or past each row's length hold garbage (never to be read)."""
    x = x.clone()
    junk = torch.tensor([math.nan, math.inf, 1e30, -math.inf, 3e4], dtype=torch.float32).to(x.dtype)
    for r, L in enumerate(lengths):
        L = max(0, min(int(L), x.shape[1]))
        if L < x.shape[1]:
            idx = torch.randint(0, len(junk), (x.shape[1] - L,), generator=g)
            x[r, L:] = junk[idx]
    return x


def _same(a, b, order: str) -> bool:
    ai, av, bi, bv = a.indices, a.values, b.indices, b.values
    if order == "any":
        def canon(i, v):
            key = torch.where(i < 0, torch.full_like(i, 2**31 - 1), i)
            _, p = torch.sort(key, dim=1)
            return torch.gather(i, 1, p), torch.gather(v, 1, p)

        ai, av = canon(ai, av)
        bi, bv = canon(bi, bv)
    return torch.equal(ai.cpu(), bi.cpu()) and torch.equal(av.cpu().view(torch.int32), bv.cpu().view(torch.int32))


def _check(x, k, **kw):
    a = sparsetopk.topk(x, k, backend=BK, return_values=True, **kw)
    a2 = sparsetopk.topk(x, k, backend=BK, return_values=True, **kw)
    b = sparsetopk.topk(x, k, backend="reference", return_values=True, **kw)
    order = kw.get("order", "rank")
    assert _same(a, b, order), f"mismatch vs reference: k={k} shape={tuple(x.shape)} dtype={x.dtype} " + str(
        {n: v for n, v in kw.items() if not torch.is_tensor(v)})
    assert torch.equal(a.indices, a2.indices) and torch.equal(
        a.values.view(torch.int32), a2.values.view(torch.int32)), "not deterministic"


@pytest.fixture
def path(request, monkeypatch):
    monkeypatch.setenv("SPARSETOPK_NV_PATH", request.param)
    return request.param


@pytest.mark.parametrize("path", PATHS, indirect=True)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [1, 16, 2048, 4096])
def test_paths_adversarial(path, kind, k):
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{kind}|{k}".encode()))
    width = 70000
    lens = [-5, 0, 1, k - 1, k, k + 1, 9000, 40000, width, width + 100]
    rows = len(lens)
    dtype = {1: torch.float16, 16: torch.bfloat16}.get(k, torch.float32)
    if kind == "band_bf16ties":
        dtype = torch.bfloat16
    x = _dirty(_data(kind, rows, width, dtype, g), lens, g).to(dev)
    lengths = torch.tensor(lens, dtype=torch.int64, device=dev)
    for j, order in enumerate(["any", "rank", "index"]):
        _check(x, k, lengths=lengths, order=order, tie_break=("low", "high")[j % 2])


@pytest.mark.parametrize("path", ["rows,sampled-rows", "rows,sampled-rows,estk"], indirect=True)
@pytest.mark.parametrize("k", [1, 16, 64])
def test_sampled_rows_small_k(path, k):
    """Small k forced onto the sampled-rows kernel: ~16 n / S candidates a
    row, whose k-th key's bin often holds more keys than its list (out_cap)
    takes, so the warps' candidate regions are packed before the radix
    select (and rows of <= 256 candidates before finish_small). Many rows,
    so that a race around that packing shows (a missing barrier after it
    gave 1-14 wrong rows in 419 in fuzz batches of this shape)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"smallk|{path}|{k}".encode()))
    x = torch.randn(419, 40000, generator=g).to(dev)
    for j, order in enumerate(["any", "index", "rank"]):
        _check(x, k, order=order, tie_break=("low", "high")[j % 2], index_scale=1 + j, index_offset=j)


@pytest.mark.parametrize("path", ["auto", "stream,online", "split", "split,no-balanced", "split,legacy-split",
                                  "cluster=1", "cluster", "rows,sampled-rows"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_paths_options(path, dtype):
    """starts, shard view, forced columns, int lengths, misaligned row views."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(7)
    rows, width = 6, 50001
    buf = torch.randn(rows, width + 3, generator=g).to(dtype)
    x = buf[:, 3:].to(dev)  # misaligned, row stride > width
    starts = torch.tensor([0, 5, 1, 20000, width, -3], dtype=torch.int32, device=dev)
    for k in (64, 2048):
        _check(x, k, starts=starts, lengths=torch.tensor([width, 30000, 49000, 10, 7, 40000], device=dev),
               force_begin=4, force_end=100, order="rank")
        _check(x, k, index_scale=3, index_offset=2, lengths=3 * width - 10, order="index", tie_break="high")
        _check(x, k, lengths=45000, order="any")


@pytest.mark.parametrize("path", ["auto", "split", "split,no-balanced", "split,legacy-split", "no-cluster", "cluster=2",
                                  "cluster=7", "cluster=8"], indirect=True)
def test_split_shapes(path):
    """The shapes of the issue's long-row cells (smaller row counts), 1M-column
    stride with per-row lengths, and the 64-row split."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(3)
    x = torch.randn(4, 1 << 20, generator=g, device=dev)
    for lens in ([40000] * 4, [150000] * 4, [1 << 20, 40000, 150000, 3000]):
        lengths = torch.tensor(lens, dtype=torch.int32, device=dev)
        for k in (2048, 4096):
            _check(x, k, lengths=lengths, order="any")
    x = torch.randn(64, 1 << 18, generator=g, device=dev)
    _check(x, 2048, order="rank")
    _check(x.to(torch.bfloat16), 2048, order="any")


@pytest.mark.parametrize("path", ["auto", "online,no-sampled-rows", "no-sampled-rows"], indirect=True)
def test_prefill_like_stream(path):
    """Ragged causal prefill shape (rows > 2 x SMs, up to 128K columns): the
    sampled-rows kernel by default; the one-block rows kernel (two-read
    select, online gather opt-in) with no-sampled-rows."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(11)
    rows, width = 512, 131072
    x = torch.randn(rows, width, generator=g, device=dev)
    lengths = (width - rows + 1 + torch.arange(rows, device=dev)).to(torch.int32)
    lengths[::7] = torch.randint(1, width, (len(lengths[::7]),), generator=g, device=dev).to(torch.int32)
    _check(x, 2048, lengths=lengths, order="any")
    _check(x, 2048, lengths=lengths, order="rank")
    # narrow band: every row overflows the online buffer (exact fallback)
    xb = (torch.randint(0, 4, (64, width), generator=g, device=dev, dtype=torch.int32) + 0x3F800000).view(torch.float32)
    _check(xb, 2048, order="index")


@pytest.mark.parametrize("path", ["auto", "no-cluster", "cluster=2", "cluster=7", "split"], indirect=True)
def test_cuda_graph_long_rows(path):
    """The long-row path (cluster kernel by default, else the sampled split)
    captured in a CUDA graph and replayed on new data."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(5)
    rows, width, k = 4, 1 << 20, 2048
    x = torch.randn(rows, width, generator=g, device=dev)
    lengths = torch.tensor([40000, 150000, width, 1000], dtype=torch.int32, device=dev)
    oi = torch.empty(rows, k, dtype=torch.int32, device=dev)
    ov = torch.empty(rows, k, dtype=torch.float32, device=dev)

    def fn():
        sparsetopk.topk(x, k, lengths=lengths, order="any", out=(oi, ov), backend=BK)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for step in range(3):
        x.copy_(torch.randn(rows, width, generator=g, device=dev) if step != 1 else
                (torch.randint(0, 4, (rows, width), generator=g, device=dev, dtype=torch.int32) + 0x3F800000).view(
                    torch.float32))
        lengths.copy_(torch.randint(-3, width + 5, (rows,), generator=g, device=dev).to(torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        ref = sparsetopk.topk(x, k, lengths=lengths, order="any", return_values=True, backend="reference")
        assert _same(type(ref)(oi, ov), ref, "any"), f"graph replay {step}"


@pytest.mark.parametrize("path", ["auto", "balanced", "balanced,no-iearly", "balanced,no-chist", "balanced,sample22",
                                  "balanced,wchunks=2", "balanced,wchunks=8", "split,no-balanced"],
                         indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_balanced_ragged(path, dtype):
    """DSA-decode-shaped calls: ragged rows (log-uniform lengths from 2K to the
    full 256K buffer, plus lengths <= 0, == k and past the buffer) in one call,
    so the balanced gather gives rows 1 to 64 chunks (32 rows: "auto" takes
    the balanced split for every dtype, the plan's C <= 3 rule); misaligned and offset
    rows by starts; forced columns (the full-key kernel); more rows than one
    block's scan (300); rows of one kind that overflow a warp segment
    (blocky: the final kernel's exact fallback)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}".encode()))
    width = 1 << 18
    ctx = torch.exp(torch.empty(28).uniform_(math.log(2000), math.log(width), generator=g)).long().tolist()
    lens = [-5, 0, 2048, width + 100] + ctx
    rows = len(lens)
    x = _dirty(_data("normal", rows, width, dtype, g), lens, g)
    x[3, 5000:11000] = 50.0  # blocky row: its warp segments overflow
    x = x.to(dev)
    lengths = torch.tensor(lens, dtype=torch.int32, device=dev)
    for j, (k, order) in enumerate([(2048, "any"), (2048, "rank"), (4096, "index"), (64, "any")]):
        _check(x, k, lengths=lengths, order=order, tie_break=("low", "high")[j % 2])
    starts = torch.randint(0, 50, (rows,), generator=g).to(dev)
    _check(x, 2048, lengths=lengths, starts=starts, order="any")
    _check(x, 2048, lengths=lengths, force_begin=3, force_end=7, order="index")
    xs = _data("specials", 300, 9000, dtype, g).to(dev)
    lens300 = torch.randint(-3, 9005, (300,), generator=g, dtype=torch.int32).to(dev)
    _check(xs, 2048, lengths=lens300, order="any")


def test_plan_reports_paths(monkeypatch):
    from sparsetopk_nvidia_sm100._backend import _ext

    C = _ext()
    monkeypatch.delenv("SPARSETOPK_NV_PATH", raising=False)
    p = C.plan(4, 1 << 20, 2048, 0)
    assert p["cluster"] >= 8 and not p["split"] and not p["online"]  # few long rows: cluster; online is opt-in
    assert p["pdl"] == (torch.cuda.get_device_capability(0)[0] >= 9)  # programmatic dependent launch on sm_90+
    p = C.plan(64, 1 << 20, 2048, 0)  # C <= 3 would fit: the balanced split (fp32)
    assert p["split"] and p["balanced"] and not p["cluster"]
    for code in (1, 2):  # 16-bit scores: the balanced split only where C <= 3 would fit
        p = C.plan(64, 1 << 20, 2048, 0, code)
        assert p["split"] and p["balanced"] and not p["cluster"]
        assert C.workspace_bytes(64, 1 << 20, 2048, 0, code) > 0
        assert C.plan(8, 1 << 20, 2048, 0, code)["cluster"] >= 2  # C = 9 fits: the cluster kernel
        assert C.workspace_bytes(8, 1 << 20, 2048, 0, code) == 0
    p = C.plan(16, 1 << 20, 2048, 0)  # 8+ rows of 768K+ columns: the balanced split whatever C
    assert p["split"] and p["balanced"] and not p["cluster"]
    assert C.plan(8, 1 << 20, 2048, 0)["balanced"]
    assert C.plan(16, 1 << 20, 2048, 0, 1)["cluster"] >= 2  # (bf16)
    assert C.plan(16, 1 << 19, 2048, 0)["cluster"] >= 2  # shorter rows: clusters cover most of the GPU (6 per row)
    assert C.plan(7, 1 << 20, 2048, 0)["cluster"] >= 2  # fewer rows: the cluster kernel
    p = C.plan(4096, 131072, 2048, 0)
    assert not p["split"] and not p["cluster"] and p["sampled_rows"]  # prefill: sampled rows
    # its estimate kernel first where rows are likely one-run samples: starts (packed), or a buffer <= 64K wide
    assert not p["est_kernel"] and C.plan(4096, 131072, 2048, 0, starts=True)["est_kernel"]
    assert C.plan(4096, 65536, 2048, 0)["sampled_rows"] and C.plan(4096, 65536, 2048, 0)["est_kernel"]
    assert C.workspace_bytes(4096, 131072, 2048, 0) == 4096 * 8  # (its words, whether or not it runs)
    assert not C.plan(4096, 32768, 2048, 0)["sampled_rows"]  # rows that fit stay resident (rows kernel)
    # the rows kernel: at least next_pow2(k) / 4 threads (its rank sort in registers)
    assert C.plan(4096, 4096, 2048, 0)["block"] == 512 and C.plan(4096, 4096, 1024, 0)["block"] == 256
    assert C.plan(1024, 16384, 4096, 0)["block"] == 1024 and C.plan(1024, 16384, 2048, 0)["block"] == 512
    assert not C.plan(4096, 131072, 512, 0)["sampled_rows"]  # smaller k: not measured there
    assert not C.plan(4096, 1 << 20, 2048, 0)["sampled_rows"]  # rows past 256K: the sample floor's candidates
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "no-cluster")
    p = C.plan(4, 1 << 20, 2048, 0)
    assert p["split"] and not p["sampled"] and not p["cluster"]  # few rows: legacy split
    assert C.plan(16, 1 << 20, 2048, 0)["sampled"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "cluster=2")
    assert C.plan(3, 5000, 16, 0)["cluster"] == 2
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "cluster=7")
    assert C.plan(3, 5000, 16, 0)["cluster"] == 7
    for bad in ("cluster=0", "cluster=17", "cluster=x", "cluster=", "cluster=+1", "sruns=0", "sruns=5", "sruns=12",
                "stampblock=", "stampblock=-1", "stampblock=1x", "stampblock=12345678"):
        monkeypatch.setenv("SPARSETOPK_NV_PATH", bad)
        with pytest.raises(ValueError):
            C.plan(3, 5000, 16, 0)
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "online,no-sampled-rows")
    assert C.plan(4096, 131072, 2048, 0)["online"] and not C.plan(4096, 131072, 2048, 0)["sampled_rows"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "rows,sampled-rows")
    assert C.plan(4, 5000, 16, 0)["sampled_rows"]
    assert C.plan(4, 5000, 16, 0)["est_kernel"] and not C.plan(4, 1 << 17, 16, 0)["est_kernel"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "rows,sampled-rows,estk")
    assert C.plan(4, 1 << 17, 16, 0)["est_kernel"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "rows,sampled-rows,no-estk")
    assert not C.plan(4, 5000, 16, 0, starts=True)["est_kernel"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "rows,sampled-rows,sruns=4,sruns-fixed,stampblock=7,no-cspan,no-pdl,cluster=7")
    assert C.plan(3, 5000, 16, 0)["cluster"] == 7
    assert not C.plan(3, 5000, 16, 0)["pdl"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "split,legacy-split")
    p = C.plan(4, 1 << 20, 2048, 0)
    assert p["split"] and not p["sampled"] and not p["balanced"]
    for env in ("split", "balanced"):  # the sampled split gathers balanced chunks
        monkeypatch.setenv("SPARSETOPK_NV_PATH", env)
        p = C.plan(16, 1 << 20, 2048, 0)
        assert p["split"] and p["sampled"] and p["balanced"] and not p["cluster"]
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert p["items"] == 512 and p["grain"] == 2048 and p["gather_blocks"] >= sms  # (grain: the least chunk)
        assert not C.plan(1100, 1 << 20, 2048, 0)["balanced"]  # past the per-block row table: chunked
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "split,no-balanced")
    p = C.plan(16, 1 << 20, 2048, 0)
    assert p["split"] and p["sampled"] and not p["balanced"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "no-balanced")  # the cluster kernel where C >= 2 fits
    assert C.plan(64, 1 << 20, 2048, 0)["cluster"] >= 2
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "rows,no-online")
    p = C.plan(4, 1 << 20, 2048, 0)
    assert not p["split"] and not p["online"]
    monkeypatch.setenv("SPARSETOPK_NV_PATH", "bogus")
    with pytest.raises(ValueError):
        C.plan(4, 1 << 20, 2048, 0)


@pytest.mark.parametrize("path", ["cluster=1,bulk", "cluster=2,bulk", "cluster=16,bulk", "cluster=2", "cluster=5",
                                  "cluster=16"], indirect=True)
@pytest.mark.parametrize("kind", ["normal", "sorted", "band", "const", "specials", "blocky"])
def test_streamed_gathers(path, kind):
    """Streamed rows through the cluster kernel's TMA bulk-copy gather and its
    per-warp gather (rotated spans; skewed rows overflow a warp's region):
    misaligned row starts (head and tail outside the aligned interior), every
    dtype, per-row lengths cutting the last stage short, candidates overflowing
    (band, const, blocky: the exact fallback)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{kind}".encode()))
    width = 1 << 20
    lens = [1 << 20, 300001, 150000, 95001, 47000, 2049, 0]
    for dtype, k, shift in ((torch.float32, 2048, 3), (torch.bfloat16, 4096, 1), (torch.float16, 16, 0)):
        x = _data(kind, len(lens), width + shift, dtype, g)[:, shift:]
        x = _dirty(x, lens, g).to(dev)
        lengths = torch.tensor(lens, dtype=torch.int64, device=dev)
        for j, order in enumerate(["any", "rank", "index"]):
            _check(x, k, lengths=lengths, order=order, tie_break=("low", "high")[j % 2])


@pytest.mark.parametrize("path", ["cluster", "cluster=3", "cluster=1"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_cluster_shared_bits(path, dtype):
    """The cluster select skips key bits every remaining key shares (the low
    score bits of 16-bit dtypes, the common top bits of the row's global
    indices): rows of exact ties at negative and positive thresholds, NaN /
    +-inf / +-0 among the ties, dirty columns past each length, shard views
    whose global indices reach past 2^16 / 2^17 / 2^18, forced columns, both
    tie rules; resident and streamed rows."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}".encode()))
    width = 120000
    lens = [width, 40000, 70001, 100000, 3000]
    for sign in (1.0, -1.0):
        x = _shared_bits_rows(lens, width, sign, dtype, g, special_row=4).to(dev)
        lengths = torch.tensor(lens, dtype=torch.int64, device=dev)
        _check_shard_views(x, (2048,), lengths, scale_lengths=False)
        _check(x, 4096, lengths=lengths, order="any", force_begin=3, force_end=100)


def _shared_bits_rows(lens, width, sign, dtype, g, special_row, band_row=None) -> torch.Tensor:
    """Rows for the shared-bit skips (dirty past lens): exact ties at +-0.5 /
    1 / 1.5 / 2 (sign), both signs in row 1, N(0,1) in row 2 (16-bit: ties
    only from rounding), a band of max-pooled logits in band_row, NaN /
    +-inf / +-0 among the ties in special_row."""
    x = (sign * torch.randint(1, 5, (len(lens), width), generator=g).float() * 0.5).to(dtype)
    x[1, ::7] = -x[1, ::7]
    x[2] = torch.randn(width, generator=g).to(dtype)
    if band_row is not None:
        x[band_row] = torch.randn(width, 64, generator=g).amax(-1).to(dtype)
    sp = torch.tensor([math.nan, math.inf, -math.inf, 0.0, -0.0], dtype=torch.float32).to(dtype)
    x[special_row, ::3] = sp[torch.randint(0, len(sp), (len(range(0, width, 3)),), generator=g)]
    return _dirty(x, lens, g)


def _check_shard_views(x, ks, lengths, scale_lengths):
    """Every k in ks under shard views (index_scale / index_offset), every
    order, the tie rule alternating; scale_lengths: lengths x scale (the same
    buffer columns valid in every view)."""
    for scale, offset in ((1, 0), (3, 2), (2, 1), (8, 7)):
        for j, order in enumerate(["any", "rank", "index"]):
            tie = ("low", "high")[(j + scale) % 2]
            for k in ks:
                _check(x, k, lengths=lengths * scale if scale_lengths else lengths, order=order, tie_break=tie,
                       index_scale=scale, index_offset=offset)


@pytest.mark.parametrize("path", ["rows,block", "rows,block,no-tile", "rows,block,stream",
                                  "rows,block,stream,no-online"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=["bf16", "f16", "f32"])
def test_rows_shared_bits(path, dtype):
    """The one-block select (rows and tile kernels: select_passes) pins the
    key bits every key of the row shares without a pass (the low score bits
    of 16-bit dtypes once the sign is known, the common top bits of the
    row's global indices) and splits the rest of the tie word into even
    digits: exact ties at the k-th score at negative and positive
    thresholds, both signs in a row, N(0,1) rows (ties only from rounding),
    NaN / +-inf / +-0 among the ties, dirty columns past each length, rows
    of 1 / 2 columns, shard views whose global indices reach past 2^11 /
    2^13 / 2^15, forced columns, both tie rules; resident rows (the tile
    kernel at k <= 64 without no-tile), streamed rows (one read, two reads)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}|rowsbits".encode()))
    width = 5000
    lens = [width, 1344, 2049, 4001, 1, 2, 300, width + 7]
    for sign in (1.0, -1.0):
        x = _shared_bits_rows(lens, width, sign, dtype, g, special_row=6, band_row=3).to(dev)
        lengths = torch.tensor(lens, dtype=torch.int64, device=dev)
        _check_shard_views(x, (16, 224, 1000), lengths, scale_lengths=True)
        _check(x, 300, lengths=lengths, order="rank", force_begin=3, force_end=100)
        _check(x, 48, lengths=lengths, order="rank", force_begin=3, force_end=100)


def _threshold_ties(lens, width, k, m, a, g, below, above, ties) -> torch.Tensor:
    """Rows (row r valid up to lens[r]) whose k-th score is an exact tie: m
    columns hold ties(m), a of them taken (k - a columns hold above(k - a)),
    the rest below(n); random positions, so every block of a row gets some."""
    x = torch.empty(len(lens), width)
    for r, n in enumerate(lens):
        p = torch.randperm(n, generator=g)
        row = below(n)
        row[p[: k - a]] = above(k - a)
        row[p[k - a : k - a + m]] = ties(m)
        x[r, :n] = row
    return x


def _check_orders(x, k, lens, g, flip):
    """x with dirty tails, on the GPU, against the reference in every order
    (the tie rule alternating, shifted by flip)."""
    dev = torch.device("cuda")
    x = _dirty(x, lens, g).to(dev)
    lengths = torch.tensor(lens, dtype=torch.int32, device=dev)
    for j, order in enumerate(["any", "rank", "index"]):
        _check(x, k, lengths=lengths, order=order, tie_break=("low", "high")[(j + flip) % 2])


@pytest.mark.parametrize("path", ["cluster", "cluster=2", "cluster=3", "cluster=16", "cluster=1", "cluster,no-finish",
                                  "cluster=5,find-barrier"],
                         indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_cluster_finish(path, dtype):
    """The cluster select stops once the k-th key's bin holds <= 256 keys and
    settles it with one exchange of the bin's keys (cluster_finish; the
    no-finish path runs the passes down to Tk). Rows with m exact ties at the
    threshold score v (random positions, so every block holds some), a of
    them taken (a = 1: Tk is the bin's top key; a = m: the whole bin), m from
    1 to past 256 (then passes over the tie word shrink the bin first), both
    signs of v, both tie rules, every order; resident and streamed rows,
    dirty columns past each length."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}".encode()))
    width, k = 800000, 2048
    lens = [800000, 150000, 40000]
    for m in (1, 17, 255, 256, 257, 600):
        for a in sorted({1, (m + 1) // 2, m}):
            for v in (3.0, -3.0):
                x = _threshold_ties(lens, width, k, m, a, g,
                                    below=lambda n, v=v: v - 4 + 0.1 * torch.randn(n, generator=g),
                                    above=lambda n, v=v: v + 40 + torch.rand(n, generator=g), ties=lambda n, v=v: v)
                _check_orders(x.to(dtype), k, lens, g, m)


@pytest.mark.parametrize("path", ["cluster", "cluster=3", "cluster,no-finish"], indirect=True)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_cluster_finish_signed_zero(path, dtype):
    """cluster_finish with the threshold's ties made of +0 and -0 (random
    signs, so both sit in every block) and NaN / -inf / negatives below: -0
    ties +0 and the tie rule alone orders them, values come back as +0 (the
    reference's canonical value), and NaN never reaches the finish's bin."""
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}|zero".encode()))
    width, k = 160000, 2048
    lens = [160000, 40000, 150000]
    low = torch.tensor([math.nan, -math.inf, -1.0, -2.5])

    def zeros(m):
        z = torch.zeros(m)
        z[torch.rand(m, generator=g) < 0.5] = -0.0
        return z

    for m in (17, 256, 600):
        for a in sorted({1, (m + 1) // 2, m}):
            x = _threshold_ties(lens, width, k, m, a, g, below=lambda n: low[torch.randint(0, len(low), (n,), generator=g)],
                                above=lambda n: 1.0 + torch.rand(n, generator=g), ties=zeros)
            _check_orders(x.to(dtype), k, lens, g, m)


@pytest.mark.parametrize("path", ["auto", "rows", "cluster", "cluster=3", "cluster,rank-block0", "split"], indirect=True)
@pytest.mark.parametrize("width", [3000, 20000, 70000])
def test_rank_sort_sizes(path, width):
    """Rank order's block sort (write_ranked: counting up to 64 keys, else a
    register bitonic sort of 4 or 8 keys per thread) at every
    power-of-two size and either side of it, in blocks of 256, 512 and 1024
    threads (the width picks them), with lengths below k (all keys taken),
    exact ties (const / band rows: keys differ only in the tie word) and
    specials, both tie rules."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{width}|ranksort".encode()))
    lens = [width, width - 1, 65, 200, 1000, 2999]
    for kind in ("normal", "const", "specials", "band"):
        x = _dirty(_data(kind, len(lens), width, torch.float32, g), lens, g).to(dev)
        lengths = torch.tensor(lens, dtype=torch.int32, device=dev)
        for j, k in enumerate((65, 128, 129, 256, 257, 511, 1000, 2048, 2049, 4096)):
            if k <= width:
                _check(x, k, lengths=lengths, order="rank", tie_break=("low", "high")[j % 2])


@pytest.mark.parametrize("path", ["auto", "rows,rblock=256", "rows,rblock=1024"], indirect=True)
@pytest.mark.parametrize("kind", ["normal", "sorted", "band", "const", "specials"])
def test_rows_block_for_large_k(path, kind):
    """The rows kernel at 1024 < k <= 2048 on rows of at most 4096 columns:
    512 threads by default (the rank sort of next_pow2(k) keys in registers,
    4 a thread), 256 with rblock=256 (the shared-memory bitonic sort), 1024
    with rblock=1024; every order and tie rule, lengths below k, negative
    and past the buffer, starts,
    forced columns, dirty tails, fp32 and bf16."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{kind}|rowsblock".encode()))
    width = 4096
    lens = [width, width - 1, 3000, 2049, 1500, 0, -5, width + 100]
    lengths = torch.tensor(lens, device=dev)
    starts = torch.tensor([0, 1, 1000, 7, 2596, 4096, 3, 0], dtype=torch.int32, device=dev)
    for dt in (torch.float32, torch.bfloat16):
        x = _dirty(_data(kind, len(lens), width, dt, g), lens, g).to(dev)
        for j, k in enumerate((1025, 1500, 2048)):
            tie = ("low", "high")[j % 2]
            for order in ("rank", "index", "any"):
                _check(x, k, lengths=lengths, order=order, tie_break=tie)
            _check(x, k, lengths=lengths, starts=starts, order="rank", tie_break=tie)
            _check(x, k, lengths=lengths, force_begin=1000, force_end=1010, order="rank", tie_break=tie)


@pytest.mark.parametrize("path", ["cluster=4", "cluster=5", "cluster=7", "cluster=10", "cluster=16", "cluster=16,no-finish",
                                  "cluster=5,find-barrier", "cluster=16,rank-block0"], indirect=True)
@pytest.mark.parametrize("kind", ["normal", "blocky", "sorted", "const", "specials", "band", "band_bf16ties"])
def test_rank_spread(path, kind):
    """Rank order spread over the cluster (C >= 5, more than 128 keys; C = 4
    and rank-block0 take block 0's sort of every key): every block sorts its
    own keys (by counting up to 512 of them, in sub-runs of 128 past 256;
    else the shared-memory bitonic sort), copies its run to every block, and
    ranks its keys against the other runs by binary lifting. Runs of every
    size: empty (blocky and sorted rows put every key in one or two blocks: a
    run past 512 keys), odd and even (the 16-byte copy's odd slot), one key;
    5 to 16 blocks (several threads per key, several runs each); resident
    rows and streamed ones (width past C x ~46K), lengths below k, negative
    and past the buffer, both tie rules, narrow bands, and a shard view and
    forced columns (keys whose index word is not the column)."""
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{kind}|spread".encode()))
    # (-3: no valid column, padding only; 25000: past the buffer, clipped to its width)
    for width, lens in ((20000, [20000, 19999, 129, 130, 2049, 7777, -3, 25000]), (800000, [800000, 700001, 4095])):
        x = _dirty(_data(kind, len(lens), width, torch.float32, g), lens, g).to(dev)
        lengths = torch.tensor(lens, dtype=torch.int32, device=dev)
        for j, k in enumerate((129, 200, 1000, 2048, 4096)):
            _check(x, k, lengths=lengths, order="rank", tie_break=("low", "high")[j % 2])
        _check(x, 2048, lengths=lengths, index_scale=3, index_offset=2, order="rank", tie_break="high")
        _check(x, 2048, lengths=lengths, force_begin=4, force_end=100, order="rank")  # first 4, last 100 forced
