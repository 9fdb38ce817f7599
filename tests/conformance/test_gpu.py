"""GPU-only rules (SPEC §6): every slot written, CUDA-graph capture and
replay, the caller's stream, and sizes too big for a CPU run."""

from __future__ import annotations

import numpy as np
import oracle
import pytest
import torch
from conformance_support import (
    DTYPES,
    ORDERS,
    TIES,
    assert_result_equal,
    check_merge,
    check_topk,
    dirty,
    gen_scores,
    ids,
    lengths_tensor,
    oracle_topk,
    require_merge,
    require_topk,
    scores_tensor,
)

import sparsetopk

POISON_I = 0x7F7F7F7F
POISON_F_BITS = 0x7F7F7F7F  # float32 3.39e38: not a value any call can produce here


@pytest.fixture
def gpu(bk):
    if not bk.is_cuda:
        pytest.skip(f"{bk.name} runs on {bk.device}: GPU-only test")
    return bk


def _poisoned(rows, k, device):
    oi = torch.full((rows, k), POISON_I, dtype=torch.int32, device=device)
    ov = torch.full((rows, k), POISON_F_BITS, dtype=torch.int32, device=device).view(torch.float32)
    return oi, ov


# --------------------------------------------------------------------------
# poisoned outputs: every slot written on every call
# --------------------------------------------------------------------------
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=ids(DTYPES))
@pytest.mark.parametrize("width,k", [(33, 64), (1025, 16), (8200, 2048), (40000, 4096), (40000, 64)])
def test_poisoned_outputs(gpu, order, dtype, width, k):
    rng = np.random.default_rng(width + k)
    lvals = [width, 0, 1, k - 1, k, k + 1, width // 2, -5]
    lengths = lengths_tensor(lvals, torch.int32, gpu.device)
    arr = dirty(gen_scores(rng, len(lvals), width, "grid"), lengths=lengths)
    scores = scores_tensor(arr, dtype, gpu.device)
    require_topk(gpu, scores, k, lengths=lengths, order=order)
    exp_i, exp_v = oracle_topk(scores, k, lengths=lengths, order=order)
    for return_values in (True, False):
        oi, ov = _poisoned(len(lvals), k, gpu.device)
        out = (oi, ov) if return_values else oi
        sparsetopk.topk(scores, k, lengths=lengths, order=order, return_values=return_values, out=out, backend=gpu.name)
        torch.cuda.synchronize()
        assert_result_equal(
            oi.cpu().numpy(), ov.cpu().numpy() if return_values else None, exp_i, exp_v, order, f"poisoned rv={return_values}"
        )


def test_poisoned_merge(gpu):
    rng = np.random.default_rng(1)
    rows, R, k_in = 5, 4, 64
    idx = torch.from_numpy(rng.integers(-1, 200, size=(rows, R, k_in)).astype(np.int32)).to(gpu.device)
    val = torch.where(idx >= 0, (idx % 11).to(torch.float32), torch.full(idx.shape, float("-inf"), device=gpu.device))
    for k in (16, 64, 300):
        require_merge(gpu, idx, val, k)
        oi, ov = _poisoned(rows, k, gpu.device)
        sparsetopk.merge(idx, val, k, out=(oi, ov), backend=gpu.name)
        exp_i, exp_v = oracle.merge(idx.cpu().numpy(), val.cpu().numpy(), k)
        assert_result_equal(oi.cpu().numpy(), ov.cpu().numpy(), exp_i, exp_v, "rank", "poisoned merge")


# --------------------------------------------------------------------------
# large sizes
# --------------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 64, 2048, 4096])
@pytest.mark.parametrize("dist", ["normal", "band", "grid"])
def test_long_rows_gpu(gpu, k, dist):
    rng = np.random.default_rng(k)
    width = 40000
    arr = gen_scores(rng, 4, width, dist)
    lengths = lengths_tensor([width, 39999, 8193, k + 1], torch.int64, gpu.device)
    arr = dirty(arr, lengths=lengths)
    for j, order in enumerate(ORDERS):
        check_topk(
            gpu,
            scores_tensor(arr, DTYPES[j], gpu.device),
            k,
            lengths=lengths,
            order=order,
            tie_break=TIES[j % 2],
            thorough=j == 0,
        )


@pytest.mark.parametrize("k", [2048, 4096])
def test_large_k_shards_gpu(gpu, k):
    rng = np.random.default_rng(k)
    width = 8200
    arr = gen_scores(rng, 3, width, "grid")
    for scale, offset in [(2, 1), (4, 0)]:
        check_topk(
            gpu,
            scores_tensor(arr, torch.bfloat16, gpu.device),
            k,
            index_scale=scale,
            index_offset=offset,
            lengths=width * scale - 3,
            force_begin=4,
            force_end=128,
        )


# --------------------------------------------------------------------------
# CUDA graphs
# --------------------------------------------------------------------------
def _capture(fn):
    """Warm up on a side stream, then capture fn() into a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize(
    "dtype,width,k",
    [(torch.float32, 1025, 16), (torch.bfloat16, 8200, 2048), (torch.float16, 40000, 64)],
    ids=["f32", "bf16", "f16"],
)
def test_cuda_graph_capture_and_replay(gpu, order, dtype, width, k):
    rng = np.random.default_rng(width)
    rows = 4
    static_scores = scores_tensor(gen_scores(rng, rows, width, "normal"), dtype, gpu.device)
    static_lengths = lengths_tensor([width, width // 2, k, 1], torch.int32, gpu.device)
    static_starts = torch.zeros(rows, dtype=torch.int32, device=gpu.device)
    opts = dict(lengths=static_lengths, starts=static_starts, order=order, force_begin=2, force_end=3)
    require_topk(gpu, static_scores, k, **opts)
    oi, ov = _poisoned(rows, k, gpu.device)

    def fn():
        sparsetopk.topk(static_scores, k, return_values=True, out=(oi, ov), backend=gpu.name, **opts)

    graph = _capture(fn)
    for step, dist in enumerate(["grid", "band", "specials", "normal"]):
        # New inputs, written in place into the captured tensors.
        new_lengths = [int(x) for x in rng.integers(-2, width + 10, size=rows)]
        new_starts = [int(x) for x in rng.integers(-1, width // 3, size=rows)]
        static_lengths.copy_(torch.tensor(new_lengths, dtype=torch.int32))
        static_starts.copy_(torch.tensor(new_starts, dtype=torch.int32))
        arr = dirty(gen_scores(rng, rows, width, dist), lengths=static_lengths, starts=static_starts)
        static_scores.copy_(scores_tensor(arr, dtype, "cpu"))
        oi.fill_(POISON_I)
        ov.view(torch.int32).fill_(POISON_F_BITS)
        graph.replay()
        torch.cuda.synchronize()
        exp_i, exp_v = oracle_topk(static_scores, k, **opts)
        assert_result_equal(oi.cpu().numpy(), ov.cpu().numpy(), exp_i, exp_v, order, f"graph replay {step} ({dist})")
        # and replaying again with unchanged inputs is bit-identical
        i1, v1 = oi.clone(), ov.clone()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(oi, i1) and torch.equal(ov.view(torch.int32), v1.view(torch.int32)), "replay not deterministic"


def test_cuda_graph_merge(gpu):
    rng = np.random.default_rng(3)
    rows, R, k_in, k = 4, 4, 64, 64
    idx = torch.full((rows, R, k_in), -1, dtype=torch.int32, device=gpu.device)
    val = torch.full((rows, R, k_in), float("-inf"), device=gpu.device)
    require_merge(gpu, idx, val, k)
    oi, ov = _poisoned(rows, k, gpu.device)

    def fn():
        sparsetopk.merge(idx, val, k, out=(oi, ov), backend=gpu.name)

    graph = _capture(fn)
    for _ in range(3):
        new_i = torch.from_numpy(rng.integers(-1, 300, size=(rows, R, k_in)).astype(np.int32))
        new_v = torch.where(new_i >= 0, (new_i % 13).to(torch.float32), torch.full(new_i.shape, float("-inf")))
        idx.copy_(new_i)
        val.copy_(new_v)
        graph.replay()
        torch.cuda.synchronize()
        exp_i, exp_v = oracle.merge(new_i.numpy(), new_v.numpy(), k)
        assert_result_equal(oi.cpu().numpy(), ov.cpu().numpy(), exp_i, exp_v, "rank", "graph merge")


# --------------------------------------------------------------------------
# the caller's stream
# --------------------------------------------------------------------------
@pytest.mark.parametrize("width,k", [(1025, 16), (40000, 2048)])
def test_non_default_stream(gpu, width, k):
    """The kernel must run on the current stream: the input is written on a
    side stream after a long sleep; a launch on another stream would race."""
    rng = np.random.default_rng(width)
    rows = 4
    arr = gen_scores(rng, rows, width, "grid")
    host = scores_tensor(arr, torch.float32, "cpu").pin_memory()
    scores = torch.full((rows, width), float("nan"), device=gpu.device)
    lengths = lengths_tensor([width, 100, k, 0], torch.int32, gpu.device)
    require_topk(gpu, scores, k, lengths=lengths)
    exp_i, exp_v = oracle.topk(arr, k, lengths=lengths.cpu().numpy())
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        oi, ov = _poisoned(rows, k, gpu.device)
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on this stream
        scores.copy_(host, non_blocking=True)
        res = sparsetopk.topk(scores, k, lengths=lengths, return_values=True, out=(oi, ov), backend=gpu.name)
    side.synchronize()
    assert_result_equal(res.indices.cpu().numpy(), res.values.cpu().numpy(), exp_i, exp_v, "rank", "side stream")


def test_merge_non_default_stream(gpu):
    rng = np.random.default_rng(2)
    rows, R, k_in, k = 3, 8, 32, 32
    new_i = torch.from_numpy(rng.integers(-1, 500, size=(rows, R, k_in)).astype(np.int32))
    new_v = torch.where(new_i >= 0, (new_i % 5).to(torch.float32), torch.full(new_i.shape, float("-inf")))
    idx = torch.full((rows, R, k_in), -1, dtype=torch.int32, device=gpu.device)
    val = torch.full((rows, R, k_in), float("-inf"), device=gpu.device)
    require_merge(gpu, idx, val, k)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        idx.copy_(new_i.pin_memory(), non_blocking=True)
        val.copy_(new_v.pin_memory(), non_blocking=True)
        res = sparsetopk.merge(idx, val, k, backend=gpu.name)
    side.synchronize()
    exp_i, exp_v = oracle.merge(new_i.numpy(), new_v.numpy(), k)
    assert_result_equal(res.indices.cpu().numpy(), res.values.cpu().numpy(), exp_i, exp_v, "rank", "merge side stream")


def test_gpu_merge_large(gpu):
    rng = np.random.default_rng(5)
    rows, R, k_in = 2, 8, 2048
    idx = torch.from_numpy(rng.integers(-1, 40000, size=(rows, R, k_in)).astype(np.int32)).to(gpu.device)
    val = torch.where(idx >= 0, (idx % 97).to(torch.float32) / 4, torch.full(idx.shape, float("-inf"), device=gpu.device))
    for k in (64, 2048, 4096):
        check_merge(gpu, idx, val, k, thorough=False)
