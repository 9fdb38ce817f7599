"""The sampled split's estimate, read back from the call's workspace.

The split's outputs are exact whatever its estimate ``est`` is: a bad one
only sends rows to the final kernel's exact fallback, which no output test
can see. This test reads each row's state, the chunk size and the per-chunk
candidate counts and keys back from the workspace (``_C.split_layout`` gives
their byte offsets; the backend's ``_workspace`` seam hands the buffer over)
and holds them to the data, computed here in torch from the scores:

- a long row is in mode 4 (sampled gather), a row of <= k columns in mode 0;
- est is a 22-bit score prefix (low 42 bits zero), above every invalid key;
- the number of the row's keys >= est lies in [k, 4k] (about 2.5 k expected:
  the estimate is good enough that the fast path, not the fallback, runs);
- every chunk's count is the number of keys >= est in that chunk's columns,
  within the chunk's capacity, and the keys stored are exactly those keys.

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


@pytest.mark.parametrize("path", ["balanced", "split,no-balanced"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("shape", ["16x1M", "ragged"])
def test_split_estimate(monkeypatch, path, dtype, shape):
    from sparsetopk_nvidia_sm100._backend import NvidiaSm100Backend, _ext

    monkeypatch.setenv("SPARSETOPK_NV_PATH", path)
    kept = []

    def keep(nbytes, device):
        t = torch.full((nbytes,), 0xA5, dtype=torch.uint8, device=device)  # no stale zeros pass for counts
        kept.append(t)
        return t

    monkeypatch.setattr(NvidiaSm100Backend, "_workspace", staticmethod(keep))
    g = torch.Generator().manual_seed(zlib.crc32(f"{path}|{dtype}|{shape}".encode()))
    if shape == "16x1M":
        rows, width = 16, 1 << 20
        lens = [width] * rows
    else:  # DSA-decode-like: log-uniform lengths, plus a row of <= k columns and one past the buffer
        rows, width = 24, 1 << 18
        lens = torch.exp(torch.empty(rows - 2).uniform_(math.log(40000), math.log(width), generator=g))
        lens = [1500, width + 77] + lens.long().tolist()
    x = torch.randn(rows, width, generator=g).to(dtype)
    lengths = torch.tensor(lens, dtype=torch.int32)
    C = _ext()
    lay = C.split_layout(rows, width, K, 0, _CODE[dtype])
    assert lay is not None and lay["sampled"], lay
    assert lay["balanced"] == (path == "balanced"), lay

    res = sparsetopk.topk(x.cuda(), K, lengths=lengths.cuda(), order="any", tie_break="low", backend=BK)
    torch.cuda.synchronize()
    assert len(kept) == 1 and kept[0].numel() == lay["bytes"], (len(kept), lay)
    ws = kept[0].cpu().numpy()

    sb = lay["state_bytes"]
    state = ws[lay["state"] : lay["state"] + rows * sb].reshape(rows, sb)
    if lay["balanced"]:
        grain = int(_words(ws, lay["grain"], 1, np.int64)[0])
        assert grain >= 2048 and grain % ITEMS == 0, grain
        per_row, stride = lay["items"], lay["region"]
    else:
        per_row, stride = lay["chunks"], lay["chunks"] * lay["seg"]
    counts = _words(ws, lay["counts"], rows * per_row, np.int32).reshape(rows, per_row)
    cand = _words(ws, lay["cand"], rows * stride, np.uint64).reshape(rows, stride)

    for r in range(rows):
        n = max(0, min(lens[r], width))
        mode = int(state[r, lay["state_mode"] : lay["state_mode"] + 4].view(np.int32)[0])
        if n <= K:
            assert mode == 0, (r, n, mode)
            continue
        assert mode == 4, (r, n, mode)
        est = int(state[r, lay["state_prefix"] : lay["state_prefix"] + 8].view(np.uint64)[0])
        pre = est >> 32
        assert est & ((1 << 42) - 1) == 0, f"row {r}: est {est:#x} is not a 22-bit prefix"
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
