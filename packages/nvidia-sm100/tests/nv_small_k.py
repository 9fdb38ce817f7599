"""Helpers of the package's GPU tests: the extension's plan for a shape, a
check against the reference backend, forcing a path (SPARSETOPK_NV_PATH)."""

import torch

import sparsetopk

NV = "nvidia-sm100"


def plan(rows, width, k):
    from sparsetopk_nvidia_sm100 import _backend

    return _backend._ext().plan(rows, width, k, torch.cuda.current_device())


def set_path(monkeypatch, value):
    """SPARSETOPK_NV_PATH=value for one test ("auto": unset); the extension
    reads it on every call."""
    if value == "auto":
        monkeypatch.delenv("SPARSETOPK_NV_PATH", raising=False)
    else:
        monkeypatch.setenv("SPARSETOPK_NV_PATH", value)
    return value


def check(x, k, **kw):
    a = sparsetopk.topk(x, k, backend=NV, return_values=True, **kw)
    b = sparsetopk.topk(x, k, backend="reference", return_values=True, **kw)
    if kw.get("order", "rank") == "any":
        assert torch.equal(torch.sort(a.indices, 1)[0], torch.sort(b.indices, 1)[0])
    else:
        assert torch.equal(a.indices, b.indices)
        assert torch.equal(a.values, b.values)


def special_rows(width, band=False):
    """All-equal, -0 vs +0, NaN with -inf, plateau ties, +inf with a NaN,
    sorted ascending; with band, a narrow band around 1.0 as well."""
    dev = "cuda"
    x = torch.zeros(7 if band else 6, width, device=dev)
    x[1] = -0.0
    x[1, ::7] = 0.0
    x[2] = float("nan")
    x[2, 100:110] = float("-inf")
    x[3] = torch.randint(0, 3, (width,), device=dev).float()  # plateau ties at the threshold
    x[4] = float("inf")
    x[4, 5] = float("nan")
    x[5] = torch.arange(width, device=dev).float()
    if band:
        x[6] = torch.randn(width, device=dev) * 1e-3 + 1.0
    return x


def check_orders(x, k):
    """Every order and tie rule, on x and on x mirrored."""
    for order in ("rank", "index", "any"):
        for tie in ("low", "high"):
            check(x, k, order=order, tie_break=tie)
            check(x.flip(1).contiguous(), k, order=order, tie_break=tie)


def check_geometry(x, k, lengths, starts, scaled_length, force_begin, dtypes):
    """lengths, starts, a strided index map, forced columns: "rank" and "index"."""
    for kw in (
        {"lengths": lengths},
        {"lengths": lengths.to(torch.int32), "starts": starts},
        {"lengths": scaled_length, "index_scale": 3, "index_offset": 2},
        {"lengths": lengths, "force_begin": 2, "force_end": 3},
        {"force_begin": force_begin, "force_end": 5},
    ):
        for order in ("rank", "index"):
            for dt in dtypes:
                check(x.to(dt), k, order=order, **kw)
