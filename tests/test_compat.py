"""sparsetopk.compat against the semantics of the kernels it replaces.

Expected values come from a small NumPy/Python model of each original kernel
(its row geometry, output format and padding), written here from the
originals' documented behaviour; the selection inside a row is the SPEC's
exact order (higher score first, NaN lowest, ties to the lower index), which
is the adapters' documented refinement of the originals' unspecified choice.
No sparsetopk code computes an expected value.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sparsetopk import compat

DEVICE = "cpu"


# ---------------------------------------------------------------------------
# independent model
# ---------------------------------------------------------------------------


def _best(values, k: int, forced=None, tie: str = "low"):
    """Indices of the best k of ``values`` (a list of Python floats) in rank order."""
    keyed = []
    for j, x in enumerate(values):
        if forced is not None and forced[j]:
            v = math.inf
        elif math.isnan(x):
            v = -math.inf
        else:
            v = x + 0.0  # -0.0 + 0.0 == +0.0
        keyed.append((-v, j if tie == "low" else -j, j))
    keyed.sort()
    return [j for (_, _, j) in keyed[:k]]


def _pad(sel, k):
    return sel + [-1] * (k - len(sel))


def vllm_rows(logits: np.ndarray, starts, ends, top_k: int, order: str = "index"):
    """vLLM top_k_per_row: row r selects among buffer columns [start, end)
    (end clipped to the buffer, negative lengths empty); indices relative to
    the start; rows of at most top_k columns give 0..len-1; -1 padding."""
    rows, width = logits.shape
    out = np.full((rows, top_k), -1, dtype=np.int64)
    for r in range(rows):
        s = min(max(int(starts[r]), 0), width)
        e = min(int(ends[r]), width)
        n = max(e - s, 0)
        if n <= top_k:
            sel = list(range(n))
        else:
            sel = _best([float(v) for v in logits[r, s:e]], top_k)
            if order == "index":
                sel = sorted(sel)
        out[r] = _pad(sel, top_k)
    return out


def vllm_decode_ends(seq_lens: np.ndarray, next_n: int, num_rows: int):
    if seq_lens.ndim == 2 and seq_lens.size == num_rows:
        return seq_lens.reshape(-1).astype(np.int64)
    flat = seq_lens.reshape(-1).astype(np.int64)
    r = np.arange(num_rows)
    return flat[r // next_n] - next_n + r % next_n + 1


def msa_select(scores_thk: np.ndarray, topk: int, num_valid, fb: int, fe: int, block_table=None):
    T, H, K = scores_thk.shape
    out = np.full((T, H, topk), -1, dtype=np.int64)
    for t in range(T):
        for h in range(H):
            if num_valid is None:
                L = K
            elif np.isscalar(num_valid):
                L = int(num_valid)
            else:
                nv = np.asarray(num_valid)
                L = int(nv[t] if nv.ndim == 1 else nv[t, h])
            L = min(max(L, 0), K)
            forced = [(p < fb or p >= L - fe) for p in range(L)]
            sel = sorted(_best([float(v) for v in scores_thk[t, h, :L]], topk, forced))
            if block_table is not None:
                bt = block_table if block_table.ndim == 3 else block_table[:, None, :]
                sel = [int(bt[t, h if bt.shape[1] > 1 else 0, p]) for p in sel]
            out[t, h] = _pad(sel, topk)
    return out


# ---------------------------------------------------------------------------
# vLLM DSA decode / prefill
# ---------------------------------------------------------------------------


def _tied_logits(rows, width, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (rows, width), generator=g).to(torch.float32)  # many exact ties
    x[:, ::9] = -0.0
    x[0, 1::4] = float("nan")
    return x


@pytest.mark.parametrize("next_n", [1, 2, 4])
@pytest.mark.parametrize("kind", ["random", "ties"])
def test_vllm_decode(next_n, kind):
    B, width, top_k = 5, 50, 8
    S = width + 13  # the row stride exceeds the width (rows of a wider buffer)
    rows = B * next_n
    g = torch.Generator().manual_seed(next_n)
    buf = torch.randn(rows, S, generator=g) if kind == "random" else _tied_logits(rows, S, next_n)
    buf[:, width:] = float("inf")  # outside every row: must never be picked
    logits = buf[:, :width]
    # zero / negative lengths for next_n > 1, short rows, exact fits, past the buffer
    seq_lens = torch.tensor([1, next_n + 3, top_k + next_n - 1, 40, width + 7], dtype=torch.int32)
    indices = torch.full((rows + 2, top_k), -777, dtype=torch.int32)  # extra rows stay untouched
    compat.top_k_per_row_decode(logits, next_n, seq_lens, indices, rows, logits.stride(0), logits.stride(1), top_k)
    ends = vllm_decode_ends(seq_lens.numpy(), next_n, rows)
    exp = vllm_rows(logits.numpy(), np.zeros(rows), ends, top_k)
    assert np.array_equal(indices[:rows].numpy(), exp), (indices[:rows], exp)
    assert (indices[rows:] == -777).all()
    if next_n > 1:
        assert (indices[0] == -1).all()  # seq_len 1: row 0 has length 2 - next_n <= 0


def test_vllm_decode_2d_seq_lens_and_orders():
    next_n, B, width, top_k = 3, 4, 40, 6
    rows = B * next_n
    logits = torch.randn(rows, width, generator=torch.Generator().manual_seed(7))
    per_row = torch.tensor([[0, 1, 6], [7, 20, 40], [41, -5, 3], [39, 38, 2]], dtype=torch.int64)
    exp = vllm_rows(logits.numpy(), np.zeros(rows), per_row.numpy().reshape(-1), top_k)
    for order in ("index", "rank", "any"):
        indices = torch.empty(rows, top_k, dtype=torch.int32)
        compat.top_k_per_row_decode(logits, next_n, per_row, indices, rows, width, 1, top_k, order=order)
        got = indices.numpy()
        if order == "index":
            assert np.array_equal(got, exp)
        else:
            assert [sorted(r) for r in got.tolist()] == [sorted(r) for r in exp.tolist()]
    # rank order: best first
    ends = per_row.numpy().reshape(-1)
    indices = torch.empty(rows, top_k, dtype=torch.int32)
    compat.top_k_per_row_decode(logits, next_n, per_row, indices, rows, width, 1, top_k, order="rank")
    for r in range(rows):
        n = min(max(int(ends[r]), 0), width)
        if n > top_k:
            assert indices[r].tolist() == _best(logits[r, :n].tolist(), top_k)


def test_vllm_decode_explicit_stride0_builds_strided_view():
    rows, width, S, top_k = 6, 30, 37, 5
    full = torch.randn(rows, S, generator=torch.Generator().manual_seed(3))
    one_row = full.view(-1)[:width].view(1, width)  # the kernel only gets a base pointer and strides
    seq_lens = torch.tensor([30, 3, 12, 29, 0, 100], dtype=torch.int32)
    indices = torch.empty(rows, top_k, dtype=torch.int32)
    compat.top_k_per_row_decode(one_row, 1, seq_lens, indices, rows, S, 1, top_k)
    exp = vllm_rows(full[:, :width].numpy(), np.zeros(rows), vllm_decode_ends(seq_lens.numpy(), 1, rows), top_k)
    assert np.array_equal(indices.numpy(), exp)


def test_vllm_errors():
    logits = torch.randn(4, 16)
    seq = torch.tensor([16, 3, 2, 1], dtype=torch.int32)
    ok = torch.empty(4, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match="stride1"):
        compat.top_k_per_row_decode(logits, 1, seq, ok, 4, 16, 2, 4)
    with pytest.raises(TypeError, match="indices"):
        compat.top_k_per_row_decode(logits, 1, seq, ok.long(), 4, 16, 1, 4)
    with pytest.raises(ValueError, match="indices"):
        compat.top_k_per_row_decode(logits, 1, seq, ok, 4, 16, 1, 5)
    with pytest.raises(ValueError, match="seq_lens"):
        compat.top_k_per_row_decode(logits, 1, seq[:2], ok, 4, 16, 1, 4)
    with pytest.raises(ValueError, match="stride0"):
        compat.top_k_per_row_decode(logits, 1, seq, ok, 4, 1000, 1, 4)
    with pytest.raises(TypeError, match="seq_lens"):
        compat.top_k_per_row_decode(logits, 1, seq.float(), ok, 4, 16, 1, 4)
    with pytest.raises(ValueError, match="row_starts"):
        compat.top_k_per_row_prefill(logits, seq[:3], seq, ok, 4, 16, 1, 4)


@pytest.mark.parametrize("kind", ["random", "ties"])
def test_vllm_prefill(kind):
    rows, width, top_k = 9, 48, 7
    g = torch.Generator().manual_seed(11)
    buf = torch.randn(rows, width + 5, generator=g) if kind == "random" else _tied_logits(rows, width + 5, 11)
    logits = buf[:, :width]
    # ragged rows packed in one buffer: empty, reversed, short, exact, clipped, starting at the end
    row_starts = torch.tensor([0, 5, 10, 3, 0, 20, 40, width, 30], dtype=torch.int32)
    row_ends = torch.tensor([0, 2, 14, 10, 48, 47, 60, width, 37], dtype=torch.int32)
    indices = torch.full((rows, top_k), -777, dtype=torch.int32)
    compat.top_k_per_row_prefill(logits, row_starts, row_ends, indices, rows, logits.stride(0), 1, top_k)
    exp = vllm_rows(logits.numpy(), row_starts.numpy(), row_ends.numpy(), top_k)
    assert np.array_equal(indices.numpy(), exp), (indices, exp)


# ---------------------------------------------------------------------------
# MSA / MiniMax sparse_topk_select
# ---------------------------------------------------------------------------


def _pages(T, H, K, seed, ties=False):
    g = torch.Generator().manual_seed(seed)
    if ties:
        return torch.randint(0, 3, (T, H, K), generator=g).to(torch.float32)
    return torch.randn(T, H, K, generator=g)


@pytest.mark.parametrize("layout", ["THK", "HKT"])
@pytest.mark.parametrize("nv_kind", ["none", "int", "tensor_t", "tensor_th"])
@pytest.mark.parametrize("forced", [(0, 0), (1, 2), (4, 5)])
def test_msa_sparse_topk_select(layout, nv_kind, forced):
    T, H, K, topk = 5, 3, 20, 6
    fb, fe = forced
    thk = _pages(T, H, K, seed=T + fb, ties=(fb == 1))
    max_score = thk if layout == "THK" else thk.permute(1, 2, 0).contiguous()  # [H, K, T]
    nv_t = torch.tensor([0, 3, 7, 20, 25], dtype=torch.int32)
    nv = {
        "none": None,
        "int": 9,
        "tensor_t": nv_t,
        "tensor_th": (nv_t[:, None] - torch.arange(H, dtype=torch.int32)).to(torch.int64),
    }[nv_kind]
    got = compat.sparse_topk_select(max_score, topk, nv, force_begin_blocks=fb, force_end_blocks=fe,
                                    max_score_layout=layout)
    nv_np = nv if not isinstance(nv, torch.Tensor) else nv.numpy()
    exp = msa_select(thk.numpy(), topk, nv_np, fb, fe)
    assert got.dtype == torch.int32 and tuple(got.shape) == (T, H, topk)
    assert np.array_equal(got.numpy(), exp), (got, exp)


@pytest.mark.parametrize("bt_shape", ["THP", "TP"])
def test_msa_block_table_and_output(bt_shape):
    T, H, K, P, topk = 4, 2, 12, 16, 5
    thk = _pages(T, H, K, seed=5)
    g = torch.Generator().manual_seed(9)
    if bt_shape == "THP":
        bt = torch.randperm(T * H * P, generator=g).view(T, H, P).to(torch.int32) + 1000
    else:
        bt = torch.randperm(T * P, generator=g).view(T, P).to(torch.int32) + 1000
    nv = torch.tensor([2, 12, 6, 0], dtype=torch.int64)
    out = torch.full((T, H, topk), -777, dtype=torch.int32)
    ret = compat.sparse_topk_select(thk, topk, nv, output=out, force_begin_blocks=1, force_end_blocks=1, block_table=bt)
    assert ret is out
    exp = msa_select(thk.numpy(), topk, nv.numpy(), 1, 1, block_table=bt.numpy())
    assert np.array_equal(out.numpy(), exp), (out, exp)
    # without a block table, output given: logical ids in place
    out2 = torch.empty((T, H, topk), dtype=torch.int32)
    assert compat.sparse_topk_select(thk, topk, nv, out2) is out2
    assert np.array_equal(out2.numpy(), msa_select(thk.numpy(), topk, nv.numpy(), 0, 0))


def test_msa_more_forced_than_topk_and_wide_topk():
    T, H, K = 2, 2, 10
    thk = _pages(T, H, K, seed=1)
    got = compat.sparse_topk_select(thk, 3, 8, force_begin_blocks=2, force_end_blocks=3)
    assert np.array_equal(got.numpy(), msa_select(thk.numpy(), 3, 8, 2, 3))  # lower forced pages win
    got = compat.sparse_topk_select(thk, 15, None)  # topk > K: all pages then -1
    assert got[..., :K].tolist() == [[list(range(K))] * H] * T and (got[..., K:] == -1).all()


def test_msa_errors():
    x = torch.randn(2, 3, 4)
    with pytest.raises(ValueError, match="max_score_layout"):
        compat.sparse_topk_select(x, 2, max_score_layout="TKH")
    with pytest.raises(ValueError, match="num_valid_pages"):
        compat.sparse_topk_select(x, 2, torch.ones(5, dtype=torch.int32))
    with pytest.raises(ValueError, match="block_table"):
        compat.sparse_topk_select(x, 2, block_table=torch.zeros(2, 3, 3, dtype=torch.int32))
    with pytest.raises(ValueError, match="output"):
        compat.sparse_topk_select(x, 2, output=torch.empty(2, 3, 3, dtype=torch.int32))
    with pytest.raises(TypeError, match="output"):
        compat.sparse_topk_select(x, 2, output=torch.empty(2, 3, 2, dtype=torch.int64))


# ---------------------------------------------------------------------------
# FlashInfer top_k
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sorted_", [True, False])
def test_flashinfer_top_k(dtype, sorted_):
    B, d, k = 6, 70, 9
    x = torch.randn(B, d, generator=torch.Generator().manual_seed(2)).to(dtype)
    x[1] = torch.randint(0, 3, (d,), generator=torch.Generator().manual_seed(4)).to(dtype)  # ties
    x[2, 5] = -0.0
    values, indices = compat.top_k(x, k, sorted=sorted_)
    assert indices.dtype == torch.int64 and values.dtype == dtype
    assert tuple(values.shape) == tuple(indices.shape) == (B, k)
    xf = x.float().numpy()
    for r in range(B):
        exp = _best([float(v) for v in xf[r]], k)
        if sorted_:
            assert indices[r].tolist() == exp
        else:
            assert sorted(indices[r].tolist()) == sorted(exp)
        assert torch.equal(values[r], x[r, indices[r]])  # original numbers, input dtype
    if sorted_:
        assert (values[:, :-1].float() >= values[:, 1:].float()).all()


def test_flashinfer_top_k_1d_nan_and_errors():
    x = torch.tensor([1.0, float("nan"), 3.0, 3.0, -1.0])
    v, i = compat.top_k(x, 3, sorted=True)
    assert i.tolist() == [2, 3, 0] and v.tolist() == [3.0, 3.0, 1.0]  # NaN ranks lowest here
    v, i = compat.top_k(x, 5, sorted=True)
    assert i.tolist() == [2, 3, 0, 4, 1] and math.isnan(v[4])
    with pytest.raises(ValueError, match="k"):
        compat.top_k(x, 6)
    with pytest.raises(ValueError, match="input"):
        compat.top_k(torch.zeros(2, 2, 2), 1)
