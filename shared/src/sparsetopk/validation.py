"""Host-side argument checks of SPEC §4.

Only shapes, dtypes, devices and Python ints are looked at: never device
memory, so a validated call can be captured in a CUDA graph. Each error names
the argument, the value received and what is accepted.
"""

from __future__ import annotations

import operator
from typing import Optional

import torch

from .protocol import (
    INDEX_DTYPES,
    INT32_MAX,
    ORDERS,
    SCORE_DTYPES,
    TIE_BREAKS,
    MergeCall,
    TopKCall,
)

_DT = ", ".join(str(d).replace("torch.", "") for d in SCORE_DTYPES)


def as_int(name: str, value, minimum: Optional[int] = None) -> int:
    """A Python int (numpy ints too; never bool), optionally >= minimum."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a Python int, got bool {value!r}")
    try:
        value = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be a Python int, got {type(value).__name__} {value!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


_int = as_int


def check_scores(name: str, t) -> tuple:
    """A 2-D float32/bf16/fp16 tensor with inner stride 1; returns (rows, width)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D [rows, width], got {t.dim()}-D with shape {list(t.shape)}")
    if t.dtype not in SCORE_DTYPES:
        raise TypeError(f"{name} must have dtype {_DT}, got {t.dtype}")
    rows, width = t.shape
    if width > 1 and t.stride(1) != 1:
        raise ValueError(f"{name} must have inner stride 1 (a row view is fine), got strides {t.stride()}")
    return rows, width


def check_k(k) -> int:
    k = as_int("k", k, minimum=1)
    if k > INT32_MAX:
        raise ValueError(f"k must be <= {INT32_MAX}, got {k}")
    return k


def choice(name: str, value, choices) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, got {value!r}")
    return value


def row_tensor(name: str, t, rows: int, device: torch.device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (int32/int64, shape [rows]) or None, got {type(t).__name__}")
    if t.dtype not in INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype int32 or int64, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] != rows:
        raise ValueError(f"{name} must have shape [rows] = [{rows}], got {list(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} must be on the scores' device {device}, got {t.device}")
    return t.contiguous()


def validate_out(out, rows: int, k: int, device: torch.device, want_values: bool, what: str = "out"):
    """Normalise ``out`` to (indices, values-or-None), checking everything."""
    if out is None:
        return None, None
    if isinstance(out, torch.Tensor):
        idx, val = out, None
    elif isinstance(out, (tuple, list)) and len(out) == 2:
        idx, val = out
    else:
        raise TypeError(f"{what} must be an int32 tensor [rows, k] or a pair (indices, values), got {type(out).__name__}")
    checks = [(f"{what} indices", idx, torch.int32)]
    if val is not None:
        checks.append((f"{what} values", val, torch.float32))
    elif want_values:
        raise ValueError(f"{what} must be a pair (indices, values) when values are returned, got only indices")
    for label, t, dt in checks:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != dt:
            raise TypeError(f"{label} must have dtype {str(dt).replace('torch.', '')}, got {t.dtype}")
        if tuple(t.shape) != (rows, k):
            raise ValueError(f"{label} must have shape [rows, k] = [{rows}, {k}], got {list(t.shape)}")
        if t.device != device:
            raise ValueError(f"{label} must be on device {device}, got {t.device}")
        if not t.is_contiguous():
            raise ValueError(f"{label} must be contiguous, got strides {t.stride()}")
    return idx, val


def make_topk_call(
    scores,
    k,
    *,
    lengths=None,
    starts=None,
    index_scale=1,
    index_offset=0,
    force_begin=0,
    force_end=0,
    tie_break="low",
    order="rank",
    return_values=False,
) -> TopKCall:
    rows, width = check_scores("scores", scores)
    k = check_k(k)
    index_scale = _int("index_scale", index_scale, minimum=1)
    index_offset = _int("index_offset", index_offset)
    if not 0 <= index_offset < index_scale:
        raise ValueError(f"index_offset must be in [0, index_scale) = [0, {index_scale}), got {index_offset}")
    force_begin = _int("force_begin", force_begin, minimum=0)
    force_end = _int("force_end", force_end, minimum=0)
    tie_break = choice("tie_break", tie_break, TIE_BREAKS)
    order = choice("order", order, ORDERS)
    if not isinstance(return_values, bool):
        raise TypeError(f"return_values must be a bool, got {type(return_values).__name__}")
    # The largest global index a row can produce must fit int32 (-1 is padding),
    # and so must every global length.
    if width * index_scale > INT32_MAX:
        raise ValueError(
            f"scores width {width} with index_scale {index_scale} gives global indices up to "
            f"{width * index_scale - 1}; int32 outputs accept at most {INT32_MAX - 1}"
        )
    if starts is not None:
        starts = row_tensor("starts", starts, rows, scores.device)
    if lengths is not None and not isinstance(lengths, torch.Tensor):
        lengths = _int("lengths", lengths)
        lengths = min(max(lengths, 0), width * index_scale)
    elif lengths is not None:
        lengths = row_tensor("lengths", lengths, rows, scores.device)
    return TopKCall(
        scores=scores,
        k=k,
        lengths=lengths,
        starts=starts,
        index_scale=index_scale,
        index_offset=index_offset,
        force_begin=min(force_begin, INT32_MAX),
        force_end=min(force_end, INT32_MAX),
        tie_break=tie_break,
        order=order,
        return_values=return_values,
    )


def make_merge_call(indices, values, k, *, tie_break="low", order="rank") -> MergeCall:
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be a torch.Tensor, got {type(indices).__name__}")
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"values must be a torch.Tensor, got {type(values).__name__}")
    if indices.dim() != 3:
        raise ValueError(f"indices must be 3-D [rows, R, k_in], got shape {list(indices.shape)}")
    if indices.dtype != torch.int32:
        raise TypeError(f"indices must have dtype int32 (as topk returns them), got {indices.dtype}")
    if values.dtype != torch.float32:
        raise TypeError(f"values must have dtype float32 (canonical scores), got {values.dtype}")
    if tuple(values.shape) != tuple(indices.shape):
        raise ValueError(f"values must have the shape of indices {list(indices.shape)}, got {list(values.shape)}")
    if values.device != indices.device:
        raise ValueError(f"values must be on the device of indices ({indices.device}), got {values.device}")
    k = check_k(k)
    tie_break = choice("tie_break", tie_break, TIE_BREAKS)
    order = choice("order", order, ORDERS)
    return MergeCall(indices=indices.contiguous(), values=values.contiguous(), k=k, tie_break=tie_break, order=order)
