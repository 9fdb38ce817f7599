"""The public functions of SPEC §3: validate, pick a backend, run it.

Eager calls go straight to the backend (no dispatcher overhead on the hot
path); under ``torch.compile`` the same work goes through the registered
custom ops (:mod:`sparsetopk.ops`) so the graph sees one opaque node.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

from . import registry
from .protocol import MergeCall, TopKCall
from .validation import make_merge_call, make_topk_call, validate_out


class TopK(NamedTuple):
    indices: torch.Tensor  # int32 [rows, k]
    values: Optional[torch.Tensor]  # float32 [rows, k], or None


def _compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # very old torch
        return False


def run_topk(backend, call: TopKCall, indices=None, values=None) -> TopK:
    """Allocate what the caller did not give and let ``backend`` fill it."""
    rows, k, dev = call.rows, call.k, call.device
    if indices is None:
        indices = torch.empty((rows, k), dtype=torch.int32, device=dev)
    if values is None and call.return_values:
        values = torch.empty((rows, k), dtype=torch.float32, device=dev)
    if rows and k:
        backend.topk(call, indices, values)
    return TopK(indices, values if call.return_values else None)


def run_merge(backend, call: MergeCall, indices=None, values=None) -> TopK:
    rows, k, dev = call.rows, call.k, call.device
    if indices is None:
        indices = torch.empty((rows, k), dtype=torch.int32, device=dev)
    if values is None:
        values = torch.empty((rows, k), dtype=torch.float32, device=dev)
    if rows:
        if call.indices.shape[1] * call.indices.shape[2] == 0:
            indices.fill_(-1)
            values.fill_(float("-inf"))
        else:
            backend.merge(call, indices, values)
    return TopK(indices, values)


def topk(
    scores: torch.Tensor,
    k: int,
    *,
    lengths=None,
    starts=None,
    index_scale: int = 1,
    index_offset: int = 0,
    force_begin: int = 0,
    force_end: int = 0,
    tie_break: str = "low",
    order: str = "rank",
    return_values: bool = False,
    backend: Optional[str] = None,
    out=None,
) -> TopK:
    """Exact top-k of each row of ``scores`` in the canonical order (SPEC §1).

    Returns ``TopK(indices, values)``: int32 global column indices ``[rows,
    k]`` (-1 where a row has fewer than k valid columns) and, when
    ``return_values``, their float32 canonical scores (-inf in padding).
    ``out`` may be an indices tensor or an ``(indices, values)`` pair to
    write into. See the project README for every option.
    """
    call = make_topk_call(
        scores,
        k,
        lengths=lengths,
        starts=starts,
        index_scale=index_scale,
        index_offset=index_offset,
        force_begin=force_begin,
        force_end=force_end,
        tie_break=tie_break,
        order=order,
        return_values=return_values,
    )
    idx_out, val_out = validate_out(out, call.rows, call.k, call.device, return_values)
    if _compiling():
        # Selection reads files and the environment: it runs inside the op,
        # at run time, where it is a cached lookup (never a measurement).
        from . import ops

        return ops.topk_via_op(backend or "", call, idx_out, val_out)
    return run_topk(registry.select(call, backend), call, idx_out, val_out)


def merge(
    indices: torch.Tensor,
    values: torch.Tensor,
    k: int,
    *,
    tie_break: str = "low",
    order: str = "rank",
    backend: Optional[str] = None,
    out=None,
) -> TopK:
    """Exact top-k of the union of R candidate lists per row (SPEC §2).

    ``indices`` int32 and ``values`` float32, both ``[rows, R, k_in]``, as
    :func:`topk` returns them (-1 / -inf padding, any order). A global index
    listed more than once counts once, with its highest value.
    """
    call = make_merge_call(indices, values, k, tie_break=tie_break, order=order)
    idx_out, val_out = validate_out(out, call.rows, call.k, call.device, True)
    if _compiling():
        from . import ops

        return ops.merge_via_op(backend or "", call, idx_out, val_out)
    return run_merge(registry.select(call, backend), call, idx_out, val_out)
