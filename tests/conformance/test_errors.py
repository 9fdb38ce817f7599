"""SPEC §4: host-side errors that name the argument; no partial writes."""

from __future__ import annotations

import pytest
import torch

import sparsetopk

ROWS, WIDTH, K = 4, 50, 8
INT32_MAX = 2**31 - 1


def _scores(bk, **kw):
    g = torch.Generator().manual_seed(0)
    return torch.randn(ROWS, WIDTH, generator=g).to(bk.device, **kw)


def _other_device(bk):
    """A device that is not the scores' device (meta works everywhere)."""
    return "cpu" if bk.is_cuda else "meta"


# (case id, argument name that must appear in the message, kwargs-builder)
def _topk_cases(bk):
    dev = bk.device
    other = _other_device(bk)
    s = _scores(bk)
    big = torch.randn(ROWS, WIDTH * 2, device=dev)
    return [
        ("scores-1d", "scores", dict(scores=s[0], k=K)),
        ("scores-3d", "scores", dict(scores=s.reshape(2, 2, WIDTH), k=K)),
        ("scores-float64", "scores", dict(scores=s.double(), k=K)),
        ("scores-int32", "scores", dict(scores=s.to(torch.int32), k=K)),
        ("scores-not-tensor", "scores", dict(scores=s.cpu().numpy(), k=K)),
        ("scores-inner-stride", "scores", dict(scores=big[:, ::2], k=K)),
        ("scores-transposed", "scores", dict(scores=torch.randn(WIDTH, ROWS, device=dev).t(), k=K)),
        ("k-zero", "k", dict(scores=s, k=0)),
        ("k-negative", "k", dict(scores=s, k=-3)),
        ("k-float", "k", dict(scores=s, k=2.5)),
        ("k-past-int32", "k", dict(scores=s, k=2**31)),
        ("lengths-shape-long", "lengths", dict(scores=s, k=K, lengths=torch.full((ROWS + 1,), 5, dtype=torch.int32, device=dev))),
        ("lengths-shape-2d", "lengths", dict(scores=s, k=K, lengths=torch.full((ROWS, 1), 5, dtype=torch.int32, device=dev))),
        ("lengths-float", "lengths", dict(scores=s, k=K, lengths=torch.full((ROWS,), 5.0, device=dev))),
        ("lengths-int16", "lengths", dict(scores=s, k=K, lengths=torch.full((ROWS,), 5, dtype=torch.int16, device=dev))),
        ("lengths-device", "lengths", dict(scores=s, k=K, lengths=torch.full((ROWS,), 5, dtype=torch.int32, device=other))),
        ("lengths-float-scalar", "lengths", dict(scores=s, k=K, lengths=5.5)),
        ("starts-shape", "starts", dict(scores=s, k=K, starts=torch.zeros((ROWS - 1,), dtype=torch.int32, device=dev))),
        ("starts-float", "starts", dict(scores=s, k=K, starts=torch.zeros((ROWS,), device=dev))),
        ("starts-device", "starts", dict(scores=s, k=K, starts=torch.zeros((ROWS,), dtype=torch.int64, device=other))),
        ("starts-int", "starts", dict(scores=s, k=K, starts=3)),
        ("force_begin-neg", "force_begin", dict(scores=s, k=K, force_begin=-1)),
        ("force_end-neg", "force_end", dict(scores=s, k=K, force_end=-2)),
        ("index_scale-zero", "index_scale", dict(scores=s, k=K, index_scale=0)),
        ("index_scale-neg", "index_scale", dict(scores=s, k=K, index_scale=-2)),
        ("index_offset-neg", "index_offset", dict(scores=s, k=K, index_scale=2, index_offset=-1)),
        ("index_offset-eq-scale", "index_offset", dict(scores=s, k=K, index_scale=2, index_offset=2)),
        ("index_offset-unsharded", "index_offset", dict(scores=s, k=K, index_offset=1)),
        ("int32-overflow", "index_scale", dict(scores=s, k=K, index_scale=2**26)),
        ("tie_break", "tie_break", dict(scores=s, k=K, tie_break="mid")),
        ("order", "order", dict(scores=s, k=K, order="sorted")),
        ("backend-unknown", "backend", dict(scores=s, k=K, backend="no-such-backend")),
    ]


def _ids(cases):
    return [c[0] for c in cases]


_TOPK_IDS = [
    "scores-1d",
    "scores-3d",
    "scores-float64",
    "scores-int32",
    "scores-not-tensor",
    "scores-inner-stride",
    "scores-transposed",
    "k-zero",
    "k-negative",
    "k-float",
    "k-past-int32",
    "lengths-shape-long",
    "lengths-shape-2d",
    "lengths-float",
    "lengths-int16",
    "lengths-device",
    "lengths-float-scalar",
    "starts-shape",
    "starts-float",
    "starts-device",
    "starts-int",
    "force_begin-neg",
    "force_end-neg",
    "index_scale-zero",
    "index_scale-neg",
    "index_offset-neg",
    "index_offset-eq-scale",
    "index_offset-unsharded",
    "int32-overflow",
    "tie_break",
    "order",
    "backend-unknown",
]


def _call_topk(kw, out=None, backend_default=None):
    kw = dict(kw)
    scores = kw.pop("scores")
    k = kw.pop("k")
    kw.setdefault("backend", backend_default)
    return sparsetopk.topk(scores, k, out=out, **kw)


@pytest.mark.parametrize("case", _TOPK_IDS)
def test_topk_errors_name_the_argument(bk, case):
    ((name, arg, kw),) = [c for c in _topk_cases(bk) if c[0] == case]
    # A valid out pair must be left untouched by a failing call.
    oi = torch.full((ROWS, K), 0x7F7F7F7F, dtype=torch.int32, device=bk.device)
    ov = torch.full((ROWS, K), 1.5, dtype=torch.float32, device=bk.device)
    oi0, ov0 = oi.clone(), ov.clone()
    sc = kw["scores"]
    out = (oi, ov) if kw["k"] == K and isinstance(sc, torch.Tensor) and tuple(sc.shape) == (ROWS, WIDTH) else None
    with pytest.raises((ValueError, TypeError)) as ei:
        _call_topk(dict(kw, return_values=True), out=out, backend_default=bk.name)
    msg = str(ei.value)
    assert arg in msg, f"{case}: message does not name {arg!r}: {msg!r}"
    assert torch.equal(oi, oi0) and torch.equal(ov, ov0), f"{case}: out= written on error"


def test_int32_overflow_is_an_error_but_the_edge_is_not(bk):
    s = _scores(bk)
    # width * scale just past int32
    with pytest.raises((ValueError, TypeError)) as ei:
        sparsetopk.topk(s, K, index_scale=(INT32_MAX // WIDTH) + 1, backend=bk.name)
    assert "index_scale" in str(ei.value) or "index_offset" in str(ei.value)


_OUT_CASES = [
    "short",
    "long-k",
    "int64",
    "float64-values",
    "values-shape",
    "device",
    "not-tensor",
    "triple",
    "indices-only-with-values",
]


@pytest.mark.parametrize("case", _OUT_CASES)
def test_out_errors(bk, case):
    s = _scores(bk)
    dev = bk.device
    other = _other_device(bk)
    good_i = torch.full((ROWS, K), 0x7F7F7F7F, dtype=torch.int32, device=dev)
    good_v = torch.full((ROWS, K), 2.5, dtype=torch.float32, device=dev)
    gi0, gv0 = good_i.clone(), good_v.clone()
    out = {
        "short": (torch.zeros((ROWS - 1, K), dtype=torch.int32, device=dev), good_v),
        "long-k": (torch.zeros((ROWS, K + 1), dtype=torch.int32, device=dev), good_v),
        "int64": (torch.zeros((ROWS, K), dtype=torch.int64, device=dev), good_v),
        "float64-values": (good_i, torch.zeros((ROWS, K), dtype=torch.float64, device=dev)),
        "values-shape": (good_i, torch.zeros((ROWS, K - 1), dtype=torch.float32, device=dev)),
        "device": (torch.zeros((ROWS, K), dtype=torch.int32, device=other), good_v),
        "not-tensor": [[0] * K] * ROWS,
        "triple": (good_i, good_v, good_v),
        "indices-only-with-values": good_i,
    }[case]
    with pytest.raises((ValueError, TypeError)) as ei:
        sparsetopk.topk(s, K, return_values=True, out=out, backend=bk.name)
    assert "out" in str(ei.value), f"{case}: message does not name 'out': {ei.value}"
    assert torch.equal(good_i, gi0) and torch.equal(good_v, gv0), f"{case}: out= partially written on error"


def test_named_backend_that_cannot_serve(bk):
    """A named backend that cannot serve the call is an error, never a fallback."""
    from sparsetopk import registry

    s = _scores(bk)
    for name in registry.backends():
        if name == bk.name:
            continue
        if not registry.availability(name).ok:
            with pytest.raises(ValueError) as ei:
                sparsetopk.topk(s, K, backend=name)
            assert "backend" in str(ei.value) and name in str(ei.value)
    # a k this backend does not serve (if it declares a limit)
    kmax = getattr(bk.capabilities, "k_max", None)
    if kmax is not None and kmax < WIDTH * 4:
        with pytest.raises(ValueError) as ei:
            sparsetopk.topk(torch.randn(2, kmax + 10, device=bk.device), kmax + 1, backend=bk.name)
        assert "backend" in str(ei.value)


_MERGE_IDS = [
    "indices-2d",
    "indices-int64",
    "values-float16",
    "values-shape",
    "values-device",
    "k-zero",
    "tie_break",
    "order",
    "backend",
]


@pytest.mark.parametrize("case", _MERGE_IDS)
def test_merge_errors(bk, case):
    dev = bk.device
    other = _other_device(bk)
    idx = torch.zeros((ROWS, 2, K), dtype=torch.int32, device=dev)
    val = torch.zeros((ROWS, 2, K), dtype=torch.float32, device=dev)
    arg, args, kw = {
        "indices-2d": ("indices", (idx[:, 0], val[:, 0], K), {}),
        "indices-int64": ("indices", (idx.long(), val, K), {}),
        "values-float16": ("values", (idx, val.half(), K), {}),
        "values-shape": ("values", (idx, val[:, :, :-1], K), {}),
        "values-device": ("values", (idx, val.to(other), K), {}),
        "k-zero": ("k", (idx, val, 0), {}),
        "tie_break": ("tie_break", (idx, val, K), {"tie_break": "up"}),
        "order": ("order", (idx, val, K), {"order": "desc"}),
        "backend": ("backend", (idx, val, K), {"backend": "no-such-backend"}),
    }[case]
    kw.setdefault("backend", bk.name)
    oi = torch.full((ROWS, K), 5, dtype=torch.int32, device=dev)
    ov = torch.full((ROWS, K), 5.0, dtype=torch.float32, device=dev)
    with pytest.raises((ValueError, TypeError)) as ei:
        sparsetopk.merge(*args, out=(oi, ov), **kw)
    assert arg in str(ei.value), f"{case}: message does not name {arg!r}: {ei.value}"
    assert (oi == 5).all() and (ov == 5.0).all(), f"{case}: out= written on error"
