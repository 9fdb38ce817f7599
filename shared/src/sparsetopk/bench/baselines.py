"""Kernels timed beside sparsetopk's backends: torch.topk, and FlashInfer / vLLM when importable.

None of these is held to the contract (lengths, ties, NaN, order); they are
reference points for speed only. What each one is asked to do:

- ``torch.topk``: ``torch.topk(scores[:, :E], k)`` over the dense column
  extent ``E`` of the cell (the furthest valid column of any row), with
  ``sorted=True`` unless the order is ``any``; it ignores per-row lengths and
  starts, so it reads at least as many columns as an exact kernel must. For
  ``merge``: ``torch.topk`` over the R*k_in candidate values, then a gather of
  their indices.
- ``flashinfer.top_k``: the same dense problem (``flashinfer.top_k(x, k,
  sorted=...)``), topk cells only.
- ``vllm.top_k_per_row``: ``torch.ops._C.top_k_per_row_prefill`` with
  per-row [start, end) bounds (vLLM's DSA indexer kernel; k=2048 only,
  unsharded topk cells).
"""

from __future__ import annotations

import importlib
from typing import Callable, Dict, List, Optional

import torch

from .data import Inputs
from .scenarios import Cell, geometry


class Unsupported(Exception):
    """This baseline does not serve the cell (recorded as 'n/a', not as a failure)."""


def _version(mod: str) -> Optional[str]:
    try:
        from importlib import metadata

        return metadata.version(mod)
    except Exception:
        return None


def torch_topk(cell: Cell, inp: Inputs) -> Callable[[int], object]:
    n = inp.n_views
    sorted_ = cell.order != "any"
    k = cell.k
    if cell.op == "merge":
        views = [(v["indices"].reshape(cell.rows, -1), v["values"].reshape(cell.rows, -1)) for v in inp.views]
        if k > views[0][1].shape[1]:
            raise Unsupported("k exceeds the candidates")

        def fn(i):
            idx, val = views[i % n]
            top = torch.topk(val, k, dim=-1, sorted=sorted_)
            return torch.gather(idx, 1, top.indices)

        return fn
    e = inp.extent
    if k > e:
        raise Unsupported(f"k={k} exceeds the dense extent {e}")
    xs = [v["scores"][:, :e] for v in inp.views]

    def fn(i):
        return torch.topk(xs[i % n], k, dim=-1, sorted=sorted_)

    return fn


def flashinfer_topk(cell: Cell, inp: Inputs) -> Callable[[int], object]:
    if cell.op != "topk":
        raise Unsupported("topk cells only")
    if inp.views[0]["scores"].device.type != "cuda":
        raise Unsupported("CUDA only")
    fi = importlib.import_module("flashinfer")
    f = getattr(fi, "top_k", None)
    if f is None:
        raise Unsupported("flashinfer.top_k not found")
    e, k, n = inp.extent, cell.k, inp.n_views
    if k > e:
        raise Unsupported(f"k={k} exceeds the dense extent {e}")
    xs = [v["scores"][:, :e] for v in inp.views]
    sorted_ = cell.order != "any"
    return lambda i: f(xs[i % n], k, sorted=sorted_)


def vllm_topk(cell: Cell, inp: Inputs) -> Callable[[int], object]:
    if cell.op != "topk" or cell.index_scale != 1:
        raise Unsupported("unsharded topk cells only")
    if cell.k != 2048:
        raise Unsupported("k=2048 only")
    if inp.views[0]["scores"].device.type != "cuda":
        raise Unsupported("CUDA only")
    importlib.import_module("vllm._C")
    op = torch.ops._C.top_k_per_row_prefill
    geo = geometry(cell)
    dev = inp.views[0]["scores"].device
    rows = cell.rows
    import numpy as np

    st = geo.starts if geo.starts is not None else np.zeros(rows, dtype=np.int64)
    starts = torch.as_tensor(st, dtype=torch.int32).to(dev)
    ends = torch.as_tensor(st + geo.valid_cols, dtype=torch.int32).to(dev)
    out = torch.empty((rows, cell.k), dtype=torch.int32, device=dev)
    n = inp.n_views
    xs = [v["scores"] for v in inp.views]
    if xs[0].dtype != torch.float32:
        raise Unsupported("float32 only")

    def fn(i):
        x = xs[i % n]
        op(x, starts, ends, out, rows, x.stride(0), x.stride(1), cell.k)

    return fn


# name -> (factory, python module whose import decides whether it is listed)
BASELINES: Dict[str, tuple] = {
    "torch.topk": (torch_topk, "torch"),
    "flashinfer.top_k": (flashinfer_topk, "flashinfer"),
    "vllm.top_k_per_row": (vllm_topk, "vllm"),
}


def installed() -> List[str]:
    """Baselines whose package can be found (without importing heavy modules)."""
    import importlib.util

    out = []
    for name, (_, mod) in BASELINES.items():
        try:
            if importlib.util.find_spec(mod) is not None:
                out.append(name)
        except (ImportError, ValueError):
            pass
    return out


def versions() -> Dict[str, Optional[str]]:
    return {"flashinfer": _version("flashinfer-python") or _version("flashinfer"), "vllm": _version("vllm")}
