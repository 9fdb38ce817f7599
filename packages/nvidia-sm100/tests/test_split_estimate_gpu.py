"""The sampled split's estimate, read back from the call's workspace.

The split's outputs are exact whatever its estimate ``est`` is: a bad one
only sends rows to the final kernel's exact fallback, which no output test
can see. This test reads each row's state, the chunk size and the per-chunk
candidate counts and keys back from the workspace (``_C.split_layout`` gives
their byte offsets; the backend's ``_workspace`` seam hands the buffer over)
and holds them to the data, computed here in torch from the scores:

- a long row is in mode 4 (sampled gather), a row of <= k columns in mode 0;
- est came from where it should: one binned pass below the largest sample
  (``how`` 1) on every normal row, the radix passes (``how`` 2) under
  ``sample22`` and on a row whose sample holds +inf (the binned pass
  declines: its bins span 32 octaves below the largest sample);
- est is a score prefix (low 32 bits zero; 22-bit, low 42 bits zero, from
  the radix passes), above every invalid key;
- the number of the row's keys >= est lies in [k, 4k] (about 2.5 k expected:
  the estimate is good enough that the fast path, not the fallback, runs);
- every chunk's count is the number of keys >= est in that chunk's columns,
  within the chunk's capacity, and the keys stored are exactly those keys;
- the row's bin shift (by which the final kernel bins those keys as it
  copies them, and finds the k-th one from the bins' counts instead of radix
  passes over the keys) puts the k-th key below the open top bin, in a bin
  of at most 1024 keys, so that select runs (``balanced,no-chist``: shift 0).

``test_cand_hist_regimes`` builds rows for each branch of that select (the
k-th key in a bin of a few keys, in a bin of ~900 tied scores, in the open
top bin above the sample, in a bin of more tied keys than it ranks),
asserts from the workspace's est and shift that each row lands where it was
meant to, and holds the outputs of every order to the reference.

Skipped without a usable CUDA device.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch
from nv_usable import usable

import sparsetopk

BK = "nvidia-sm100"
K = 2048
ITEMS = 8  # columns per thread item: chunk sizes are multiples of it (chunk_range)
_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}


pytestmark = pytest.mark.skipif(not usable(), reason="needs a CUDA device and the nvidia-sm100 backend")


def _ordered(x: torch.Tensor) -> np.ndarray:
    """SPEC's ordered image of the canonical score, for data with no NaN and
    nothing forced: -0 counts as +0; flip a negative float's bits, set a
    non-negative one's sign bit (unsigned order = float order)."""
    f = x.float().cpu()
    f = torch.where(f == 0, torch.zeros_like(f), f)
    b = f.numpy().view(np.uint32).astype(np.uint64)
    return np.where(b >= 0x80000000, b ^ 0xFFFFFFFF, b | 0x80000000)


def _chunk_range(n: int, chunks: int, c: int):
    cs = (n + chunks - 1) // chunks
    cs = (cs + ITEMS - 1) // ITEMS * ITEMS
    lo = min(n, c * cs)
    return lo, min(n, lo + cs)


def _words(ws: np.ndarray, off: int, count: int, dtype) -> np.ndarray:
    size = np.dtype(dtype).itemsize
    return ws[off : off + count * size].view(dtype)


BINS = 2048  # the final kernel's candidate bins (kMaxBins); the last one is open above
BIN_LIST_CAP = 1024  # keys of the k-th key's bin it ranks, at most (kBinListCap)


def _bins(o: np.ndarray, pre: int, hsh: int) -> np.ndarray:
    """split_cand_bin: 2^(hsh - 1) scores a bin from est's top 32 bits."""
    return np.minimum((o - np.uint64(pre)) >> np.uint64(hsh - 1), np.uint64(BINS - 1)).astype(np.int64)


def _capture(monkeypatch):
    from sparsetopk_nvidia_sm100._backend import NvidiaSm100Backend

    kept = []

    def keep(nbytes, device):
        t = torch.full((nbytes,), 0xA5, dtype=torch.uint8, device=device)  # no stale zeros pass for counts
        kept.append(t)
        return t

    monkeypatch.setattr(NvidiaSm100Backend, "_workspace", staticmethod(keep))
    return kept


def _row_state(ws: np.ndarray, lay: dict, r: int, how: bool = False):
    sb = lay["state_bytes"]
    st = ws[lay["state"] + r * sb : lay["state"] + (r + 1) * sb]
    mode = int(st[lay["state_mode"] : lay["state_mode"] + 4].view(np.int32)[0])
    est = int(st[lay["state_prefix"] : lay["state_prefix"] + 8].view(np.uint64)[0])
    hsh = int(st[lay["state_hsh"] : lay["state_hsh"] + 4].view(np.int32)[0])
    if how:
        return mode, est, hsh, int(st[lay["state_how"] : lay["state_how"] + 4].view(np.int32)[0])
    return mode, est, hsh


SAMPLE_THREADS = 1024  # split_sample_kernel's block: a run of ITEMS columns a thread
GRAIN_UNIT = 64  # the balanced split's chunk size is a multiple of it (kGrainUnit)
GATHER_WARPS = 8  # warps a block of split_items_kernel (kSplitWarps)


def _want_how(n: int, sbins: bool) -> int:
    """split_sample_kernel's source of est for a normal row of n > k columns:
    0 (no sample select: every key a candidate), 1 (one binned pass, which a
    numpy model of it accepts on normal rows of 12K to 1M columns: the m-th
    sample's bin holds ~1-14 samples, it declines above max(4, m / 8)) or 2
    (the radix passes, `sample22`)."""
    S = min(n, SAMPLE_THREADS * ITEMS)
    mt = max(16, (5 * K * S + 2 * n - 1) // (2 * n))
    if mt >= S:
        return 0
    return 1 if sbins else 2


@pytest.mark.parametrize("path", ["balanced", "balanced,no-chist", "split,no-balanced", "balanced,sample22"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("shape", ["16x1M", "ragged"])
def test_split_estimate(monkeypatch, path, dtype, shape):
    from sparsetopk_nvidia_sm100._backend import _ext

    monkeypatch.setenv("SPARSETOPK_NV_PATH", path)
    kept = _capture(monkeypatch)
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}|{shape}".encode()))
    if shape == "16x1M":
        rows, width = 16, 1 << 20
        lens = [width] * rows
    else:  # DSA-decode-like: log-uniform lengths, plus a row of <= k columns and one past the buffer
        rows, width = 24, 1 << 18
        lens = torch.exp(torch.empty(rows - 2).uniform_(math.log(40000), math.log(width), generator=g))
        lens = [1500, width + 77] + lens.long().tolist()
    x = torch.randn(rows, width, generator=g)
    # row 5: +inf at column 0, which every sample takes: the binned pass's
    # bins span from it and are too coarse (it declines; the radix passes'
    # estimate is as good as on any row)
    x[5, 0] = math.inf
    x = x.to(dtype)
    lengths = torch.tensor(lens, dtype=torch.int32)
    C = _ext()
    lay = C.split_layout(rows, width, K, 0, _CODE[dtype])
    assert lay is not None and lay["sampled"], lay
    assert lay["balanced"] == path.startswith("balanced"), lay
    assert lay["chist"] == (path != "balanced,no-chist"), lay
    assert lay["sbins"] == ("sample22" not in path), lay

    res = sparsetopk.topk(x.cuda(), K, lengths=lengths.cuda(), order="any", tie_break="low", backend=BK)
    torch.cuda.synchronize()
    assert len(kept) == 1 and kept[0].numel() == lay["bytes"], (len(kept), lay)
    ws = kept[0].cpu().numpy()

    if lay["balanced"]:
        grain = int(_words(ws, lay["grain"], 1, np.int64)[0])
        assert grain >= 2048 and grain % GRAIN_UNIT == 0, grain
        per_row, stride = lay["items"], lay["region"]
        # one chunk a warp of the gather's grid, at most: every row's count
        # rounds up, and a warp with a chunk more than the rest sets the time
        warps = C.plan(rows, width, K, 0, _CODE[dtype])["gather_blocks"] * GATHER_WARPS
        chunks = sum(min(-(-n // grain), per_row) for n in (max(0, min(v, width)) for v in lens) if n > K)
        assert chunks <= warps, f"{chunks} chunks of {grain} columns for {warps} warps"
    else:
        per_row, stride = lay["chunks"], lay["chunks"] * lay["seg"]
    counts = _words(ws, lay["counts"], rows * per_row, np.int32).reshape(rows, per_row)
    cand = _words(ws, lay["cand"], rows * stride, np.uint64).reshape(rows, stride)

    for r in range(rows):
        n = max(0, min(lens[r], width))
        mode, est, hsh, how = _row_state(ws, lay, r, how=True)
        if n <= K:
            assert mode == 0, (r, n, mode)
            continue
        assert mode == 4, (r, n, mode)
        want_how = 2 if r == 5 and lay["sbins"] else _want_how(n, lay["sbins"])
        assert how == want_how, f"row {r} (n={n}): est from {how}, want {want_how}"
        pre = est >> 32
        assert est & ((1 << (42 if how == 2 else 32)) - 1) == 0, f"row {r}: est {est:#x} is not a score prefix"
        assert pre > 0x007FFFFF, f"row {r}: est {est:#x} at or below ordered -inf"
        o = _ordered(x[r, :n])
        hit = o >= pre
        total = int(hit.sum())
        assert K <= total <= 4 * K, f"row {r} (n={n}): {total} keys >= est, want [{K}, {4 * K}]"
        if lay["balanced"]:
            nseg = min(-(-n // grain), per_row)
            cap = lay["region"] // nseg
        else:
            nseg, cap = per_row, lay["seg"]
        got = []
        for c in range(nseg):
            lo, hi = _chunk_range(n, nseg, c)
            want = np.nonzero(hit[lo:hi])[0] + lo
            cnt = int(counts[r, c])
            assert cnt == want.size, f"row {r} chunk {c}/{nseg} [{lo}, {hi}): count {cnt}, keys >= est {want.size}"
            assert cnt <= cap, f"row {r} chunk {c}: {cnt} candidates, capacity {cap}"
            got.append(cand[r, c * cap : c * cap + cnt])
            keys = (o[want] << np.uint64(32)) | (~want.astype(np.uint64) & np.uint64(0xFFFFFFFF))
            assert np.array_equal(np.sort(got[-1]), np.sort(keys)), f"row {r} chunk {c}: stored keys differ"
        assert sum(a.size for a in got) == total
        if not lay["chist"]:
            assert hsh == 0, (r, hsh)
            continue
        if r == 5:  # (its candidate bins span up to +inf too: the final kernel's radix select)
            continue
        assert 1 <= hsh <= 24, f"row {r}: bin shift + 1 = {hsh}"
        want = np.bincount(_bins(o[hit], pre, hsh), minlength=BINS)
        kth = _bins(np.sort(o[hit])[-K:][:1], pre, hsh)[0]  # (the k-th largest score's bin)
        assert kth < BINS - 1 and want[kth] <= BIN_LIST_CAP, f"row {r}: k-th key in bin {kth} of {want[kth]} keys"

    # the call's answer, for completeness (the exactness tests are elsewhere)
    ref = sparsetopk.topk(x, K, lengths=lengths, order="any", tie_break="low", backend="reference")
    a = torch.sort(res.indices.cpu(), dim=1).values
    b = torch.sort(ref.indices, dim=1).values
    assert torch.equal(a, b)


def test_split_layout_off_the_split(monkeypatch):
    from sparsetopk_nvidia_sm100._backend import _ext

    monkeypatch.delenv("SPARSETOPK_NV_PATH", raising=False)
    C = _ext()
    assert C.split_layout(64, 1344, 16, 0) is None  # decode shape: one warp per row
    assert C.split_layout(4, 1 << 20, 2048, 0) is None  # few rows: the cluster kernel
    lay = C.split_layout(64, 1 << 20, 2048, 0)
    assert lay is not None and lay["balanced"] and lay["bytes"] == C.workspace_bytes(64, 1 << 20, 2048, 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_cand_hist_regimes(monkeypatch, dtype):
    """Each branch of the final kernel's binned select, pinned by the workspace."""
    from sparsetopk_nvidia_sm100._backend import _ext

    monkeypatch.setenv("SPARSETOPK_NV_PATH", "balanced")
    kept = _capture(monkeypatch)
    g = torch.Generator().manual_seed(zlib.crc32(f"regimes|{dtype}".encode()))
    rows, width = 8, 1 << 20
    x = torch.randn(rows, width, generator=g)
    spread = torch.randperm(width, generator=g)
    # row 1: 900 scores tied at 3.0 (~1350 keys lie above it): the k-th key's bin
    # holds the ties, and the finish ranks them by index
    x[1, spread[:900]] = 3.0
    # row 2: 3000 large scores off the sample (it reads 64 columns every
    # width / 128), spread thin enough for the gather's segments: the k-th key
    # lies above every sample, in the open bin
    off = spread[(spread % (width // 128) >= 1000) & (spread % (width // 128) < 8000)][:3000]
    x[2, off] = 100.0 + torch.rand(3000, generator=g)
    # row 3: 2500 tied at 3.4 (~340 above): more keys in the k-th key's bin than the finish takes
    x[3, spread[:2500]] = 3.4
    # row 4: 700 tied at 2.9 (~1870 above)
    x[4, spread[1000:1700]] = 2.9
    x = x.to(dtype)
    lens = [width, width, width, width, width - 5, 700000, 300000, width + 9]
    lengths = torch.tensor(lens, dtype=torch.int32)
    lay = _ext().split_layout(rows, width, K, 0, _CODE[dtype])
    assert lay["balanced"] and lay["chist"], lay
    xd, ld = x.cuda(), lengths.cuda()
    for order, tie in (("any", "low"), ("rank", "high"), ("index", "low"), ("any", "high")):
        kept.clear()
        res = sparsetopk.topk(xd, K, lengths=ld, order=order, tie_break=tie, return_values=True, backend=BK)
        torch.cuda.synchronize()
        ref = sparsetopk.topk(x, K, lengths=lengths, order=order, tie_break=tie, return_values=True,
                              backend="reference")
        ri, rv, fi, fv = res.indices.cpu(), res.values.cpu(), ref.indices, ref.values
        if order == "any":
            ri, p = torch.sort(ri, dim=1)
            rv = torch.gather(rv, 1, p)
            fi, p = torch.sort(fi, dim=1)
            fv = torch.gather(fv, 1, p)
        assert torch.equal(ri, fi), (order, tie)
        assert torch.equal(rv.view(torch.int32), fv.view(torch.int32)), (order, tie)
    ws = kept[0].cpu().numpy()
    where = []
    for r in range(rows):
        mode, est, hsh = _row_state(ws, lay, r)
        assert mode == 4 and hsh >= 1, (r, mode, hsh)
        n = max(0, min(lens[r], width))
        o = _ordered(x[r, :n])
        b = _bins(o[o >= (est >> 32)], est >> 32, hsh)  # the candidates' bins
        kth = _bins(np.sort(o)[-K:][:1], est >> 32, hsh)[0]
        where.append((int(kth), int((b == kth).sum())))
    b, e = zip(*where)
    assert all(bb < BINS - 1 for i, bb in enumerate(b) if i != 2), where
    assert b[2] == BINS - 1, where  # the open bin: the radix select
    assert e[3] > BIN_LIST_CAP, where  # too many: the radix select
    assert 900 <= e[1] <= BIN_LIST_CAP and 700 <= e[4] <= BIN_LIST_CAP, where  # ties, ranked
    assert all(e[i] <= (64 if dtype == torch.float32 else 400) for i in (0, 5, 6, 7)), where  # a few keys


@pytest.mark.parametrize("path", ["rows,sampled-rows", "rows,sampled-rows,estk", "rows,sampled-rows,sample22",
                                  "rows,sampled-rows,no-estk"])
@pytest.mark.parametrize("n", [20000, 40000, 70000, 131072])
def test_sampled_rows_estimate(monkeypatch, path, n):
    """The sampled-rows kernel's estimate, from its stamps (one stamped block,
    `stampblock=`): est from the binned pass on a normal row of any length
    (the radix passes under ``sample22``, or where the row's sample holds
    +inf), run by sampled_est_kernel ahead of the kernel under ``estk``
    where the sample is one run (n <= 64K; not by default here: a 128K
    buffer without starts); that estimate must be the kernel's own (the
    same number of candidates as under ``no-estk``); the
    candidates gathered (keys >= est) number between k and the buffer's
    11 k / 4, so that the fast path runs; outputs against the reference."""
    from sparsetopk_nvidia_sm100._backend import _ext

    C = _ext()
    g = torch.Generator().manual_seed(zlib.crc32(f"sampled|{path}|{n}".encode()))
    rows, width = 6, 1 << 17
    x = torch.randn(rows, width, generator=g)
    x[3, 0] = math.inf  # (column 0 is in every sample)
    lens = torch.full((rows,), n, dtype=torch.int32)
    xd, ld = x.cuda(), lens.cuda()
    ref = sparsetopk.topk(x, K, lengths=lens, order="any", backend="reference")
    estk = "estk" in path.split(",") and n <= 65536
    for r in range(rows):
        monkeypatch.setenv("SPARSETOPK_NV_PATH", f"{path},stamps,stampblock={r}")
        assert C.plan(rows, width, K, 0)["sampled_rows"]
        res = sparsetopk.topk(xd, K, lengths=ld, order="any", backend=BK)
        torch.cuda.synchronize()
        t = [int(v) for v in C.cluster_stamps()]
        assert t[29] == n, (r, t[29])
        want = 2 if "sample22" in path or r == 3 else (3 if estk else 1)
        assert t[28] == want, f"row {r} (n={n}): est from {t[28]}, want {want}"
        assert K <= t[30] <= 11 * K // 4, f"row {r} (n={n}): {t[30]} candidates"
        if estk:  # the same est as the sampled-rows kernel's own pass
            monkeypatch.setenv("SPARSETOPK_NV_PATH", f"{path},no-estk,stamps,stampblock={r}")
            sparsetopk.topk(xd, K, lengths=ld, order="any", backend=BK)
            torch.cuda.synchronize()
            assert int(C.cluster_stamps()[30]) == t[30], (r, n)
        assert torch.equal(torch.sort(res.indices[r].cpu()).values, torch.sort(ref.indices[r]).values), r


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
def test_split_estimate_tied_samples(monkeypatch, dtype):
    """Scores on a grid of 1/4 (~25 samples share the m-th sample's score at
    m = 40 of 8192): the binned pass declines for fp32, whose bins of 2^13
    scores could hold many values, and takes the row for bf16 / fp16, whose
    bins then hold one value each (ties cannot make est lower than the m-th
    score). Outputs against the reference either way."""
    from sparsetopk_nvidia_sm100._backend import _ext

    monkeypatch.setenv("SPARSETOPK_NV_PATH", "balanced")
    kept = _capture(monkeypatch)
    g = torch.Generator().manual_seed(zlib.crc32(f"tied|{dtype}".encode()))
    rows, width = 8, 1 << 20
    x = (torch.round(torch.randn(rows, width, generator=g) * 4) / 4).to(dtype)
    lay = _ext().split_layout(rows, width, K, 0, _CODE[dtype])
    assert lay["balanced"] and lay["sbins"], lay
    res = sparsetopk.topk(x.cuda(), K, order="any", tie_break="low", backend=BK)
    torch.cuda.synchronize()
    ws = kept[0].cpu().numpy()
    want = 2 if dtype == torch.float32 else 1
    for r in range(rows):
        mode, est, hsh, how = _row_state(ws, lay, r, how=True)
        assert mode == 4 and how == want, f"row {r}: mode {mode}, est from {how}, want {want}"
    ref = sparsetopk.topk(x, K, order="any", tie_break="low", backend="reference")
    assert torch.equal(torch.sort(res.indices.cpu(), dim=1).values, torch.sort(ref.indices, dim=1).values)
