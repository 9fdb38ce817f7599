"""``sparsetopk::topk`` / ``sparsetopk::merge`` as torch custom ops.

The ops carry the backend name the caller gave ("" for the registry's
choice); selection happens when the op runs, as a cached lookup that never
measures anything, so compiled graphs and captured CUDA graphs are safe. Each op has a
functional form, which allocates its outputs, and an ``_out`` form that
writes into caller-given tensors. Fake implementations give static shapes.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch

from . import registry
from .api import TopK, run_merge, run_topk
from .protocol import MergeCall, TopKCall

_NO_LENGTH = -1  # validated Python-int lengths are >= 0


def _topk_call(scores, k, lengths, lengths_int, starts, scale, offset, fb, fe, tie, order, rv) -> TopKCall:
    return TopKCall(
        scores=scores,
        k=k,
        lengths=lengths if lengths is not None else (None if lengths_int == _NO_LENGTH else lengths_int),
        starts=starts,
        index_scale=scale,
        index_offset=offset,
        force_begin=fb,
        force_end=fe,
        tie_break=tie,
        order=order,
        return_values=rv,
    )


@torch.library.custom_op("sparsetopk::topk", mutates_args=())
def topk_op(
    scores: torch.Tensor,
    k: int,
    lengths: Optional[torch.Tensor],
    lengths_int: int,
    starts: Optional[torch.Tensor],
    index_scale: int,
    index_offset: int,
    force_begin: int,
    force_end: int,
    tie_break: str,
    order: str,
    return_values: bool,
    backend: str,
) -> Tuple[torch.Tensor, torch.Tensor]:
    call = _topk_call(scores, k, lengths, lengths_int, starts, index_scale, index_offset, force_begin, force_end, tie_break, order, True)
    res = run_topk(registry.select(call, backend or None), call)
    if return_values:
        return res.indices, res.values
    return res.indices, res.values.new_empty((call.rows, 0))


@topk_op.register_fake
def _(scores, k, lengths, lengths_int, starts, index_scale, index_offset, force_begin, force_end, tie_break, order, return_values, backend):
    rows = scores.shape[0]
    return (
        scores.new_empty((rows, k), dtype=torch.int32),
        scores.new_empty((rows, k if return_values else 0), dtype=torch.float32),
    )


@torch.library.custom_op("sparsetopk::topk_out", mutates_args=("indices", "values"))
def topk_out_op(
    scores: torch.Tensor,
    k: int,
    lengths: Optional[torch.Tensor],
    lengths_int: int,
    starts: Optional[torch.Tensor],
    index_scale: int,
    index_offset: int,
    force_begin: int,
    force_end: int,
    tie_break: str,
    order: str,
    backend: str,
    indices: torch.Tensor,
    values: Optional[torch.Tensor],
) -> None:
    call = _topk_call(scores, k, lengths, lengths_int, starts, index_scale, index_offset, force_begin, force_end, tie_break, order, values is not None)
    run_topk(registry.select(call, backend or None), call, indices, values)


@topk_out_op.register_fake
def _(scores, k, lengths, lengths_int, starts, index_scale, index_offset, force_begin, force_end, tie_break, order, backend, indices, values):
    return None


@torch.library.custom_op("sparsetopk::merge", mutates_args=())
def merge_op(indices: torch.Tensor, values: torch.Tensor, k: int, tie_break: str, order: str, backend: str) -> List[torch.Tensor]:
    call = MergeCall(indices=indices, values=values, k=k, tie_break=tie_break, order=order)
    res = run_merge(registry.select(call, backend or None), call)
    return [res.indices, res.values]


@merge_op.register_fake
def _(indices, values, k, tie_break, order, backend):
    rows = indices.shape[0]
    return [indices.new_empty((rows, k), dtype=torch.int32), values.new_empty((rows, k), dtype=torch.float32)]


@torch.library.custom_op("sparsetopk::merge_out", mutates_args=("out_indices", "out_values"))
def merge_out_op(
    indices: torch.Tensor, values: torch.Tensor, k: int, tie_break: str, order: str, backend: str, out_indices: torch.Tensor, out_values: torch.Tensor
) -> None:
    call = MergeCall(indices=indices, values=values, k=k, tie_break=tie_break, order=order)
    run_merge(registry.select(call, backend or None), call, out_indices, out_values)


@merge_out_op.register_fake
def _(indices, values, k, tie_break, order, backend, out_indices, out_values):
    return None


def _topk_args(call: TopKCall):
    lengths_t = call.lengths if isinstance(call.lengths, torch.Tensor) else None
    lengths_i = call.lengths if isinstance(call.lengths, int) else _NO_LENGTH
    return (
        call.scores, call.k, lengths_t, lengths_i, call.starts, call.index_scale, call.index_offset,
        call.force_begin, call.force_end, call.tie_break, call.order,
    )


def topk_via_op(backend: str, call: TopKCall, indices=None, values=None) -> TopK:
    if indices is None:
        idx, val = topk_op(*_topk_args(call), call.return_values, backend)
        return TopK(idx, val if call.return_values else None)
    topk_out_op(*_topk_args(call), backend, indices, values)
    return TopK(indices, values if call.return_values else None)


def merge_via_op(backend: str, call: MergeCall, indices=None, values=None) -> TopK:
    if indices is None:
        idx, val = merge_op(call.indices, call.values, call.k, call.tie_break, call.order, backend)
        return TopK(idx, val)
    merge_out_op(call.indices, call.values, call.k, call.tie_break, call.order, backend, indices, values)
    return TopK(indices, values)
