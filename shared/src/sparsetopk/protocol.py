"""The narrow interface every backend implements.

A backend is a plain object (usually a subclass of :class:`Backend`) that a
package exposes through the entry-point group ``sparsetopk.backends``. The
entry point names a zero-argument callable (or the object itself) that returns
the backend; loading it must be cheap and must not touch the GPU.

The core validates every argument (SPEC §4) before a backend sees a call, and
hands the backend a normalised :class:`TopKCall` / :class:`MergeCall` plus
output tensors it has already allocated. A backend only has to write every
output slot, on the tensors' device, on the current stream.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple, Union

import torch

TIE_BREAKS = ("low", "high")
ORDERS = ("rank", "index", "any")
SCORE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_DTYPES = (torch.int32, torch.int64)
INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class Availability:
    """Answer of a backend's cheap probe: can it run on this machine at all."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:  # lets ``if backend.probe():`` read naturally
        return self.ok


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a backend declares it serves (SPEC §5). Static: no probing here."""

    vendor: str  # "any", "nvidia", "amd", ...
    archs: Tuple[str, ...]  # e.g. ("sm_90a", "sm_100a"); ("any",) for portable code
    device_types: Tuple[str, ...]  # torch device types: "cpu", "cuda"
    ops: Tuple[str, ...] = ("topk", "merge")
    dtypes: Tuple[torch.dtype, ...] = SCORE_DTYPES
    k_max: Optional[int] = None  # None: no limit
    max_width: Optional[int] = None
    max_rows: Optional[int] = None
    orders: Tuple[str, ...] = ORDERS
    tie_breaks: Tuple[str, ...] = TIE_BREAKS

    def describe(self) -> str:
        dts = ",".join(str(d).replace("torch.", "") for d in self.dtypes)
        kmax = "any" if self.k_max is None else str(self.k_max)
        parts = [
            f"vendor={self.vendor}",
            f"archs={','.join(self.archs)}",
            f"devices={','.join(self.device_types)}",
            f"ops={','.join(self.ops)}",
            f"dtypes={dts}",
            f"k<={kmax}",
        ]
        if self.max_width is not None:
            parts.append(f"width<={self.max_width}")
        if self.max_rows is not None:
            parts.append(f"rows<={self.max_rows}")
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class TopKCall:
    """A validated ``topk`` call (SPEC §1).

    ``lengths`` is a tensor ``[rows]`` (int32/int64, scores' device), a Python
    int already clamped to ``[0, width * index_scale]``, or None (full rows).
    The per-row clamp against ``W_r * index_scale`` is the backend's job, on
    the device (it depends on ``starts``). ``starts`` is None or a tensor.
    """

    scores: torch.Tensor
    k: int
    lengths: Union[torch.Tensor, int, None]
    starts: Optional[torch.Tensor]
    index_scale: int
    index_offset: int
    force_begin: int
    force_end: int
    tie_break: str
    order: str
    return_values: bool

    op = "topk"

    @property
    def rows(self) -> int:
        return self.scores.shape[0]

    @property
    def width(self) -> int:
        return self.scores.shape[1]

    @property
    def dtype(self) -> torch.dtype:
        return self.scores.dtype

    @property
    def device(self) -> torch.device:
        return self.scores.device


@dataclasses.dataclass(frozen=True)
class MergeCall:
    """A validated ``merge`` call (SPEC §2): R candidate lists per row."""

    indices: torch.Tensor  # int32 [rows, R, k_in]
    values: torch.Tensor  # float32 [rows, R, k_in]
    k: int
    tie_break: str
    order: str

    op = "merge"
    return_values = True

    @property
    def rows(self) -> int:
        return self.indices.shape[0]

    @property
    def width(self) -> int:
        """Candidates per row (R * k_in): the 'width' merge selects over."""
        return self.indices.shape[1] * self.indices.shape[2]

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.indices.device


Call = Union[TopKCall, MergeCall]


class Backend:
    """Base class with the default plumbing; subclasses override the rest.

    Required: ``name``, ``version``, ``capabilities``, ``topk``/``merge`` for
    the ops declared. Optional: ``probe`` (default: available), ``supports``
    (default: checks the declared capabilities), ``priority`` (used when no
    measured timing exists; higher wins).
    """

    name: str = "unnamed"
    version: str = "0"
    priority: int = 0
    capabilities: Capabilities

    # -- availability -------------------------------------------------------
    def probe(self) -> Availability:
        """Cheap check that this backend can run here. Must not create a
        CUDA/HIP context; may import modules. The registry caches it."""
        return Availability(True)

    # -- what it serves -----------------------------------------------------
    def supports(self, call: Call) -> Optional[str]:
        """None if this backend serves ``call``, else a reason for humans."""
        return capability_mismatch(self.capabilities, call)

    # -- the work -----------------------------------------------------------
    def topk(self, call: TopKCall, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
        """Write the answer into ``indices`` (int32 [rows, k]) and, if not
        None, ``values`` (float32 [rows, k]). Every slot must be written."""
        raise NotImplementedError(f"backend {self.name!r} has no topk kernel")

    def merge(self, call: MergeCall, indices: torch.Tensor, values: torch.Tensor) -> None:
        raise NotImplementedError(f"backend {self.name!r} has no merge kernel")

    def __repr__(self) -> str:
        return f"<sparsetopk backend {self.name} {self.version}>"


def capability_mismatch(caps: Capabilities, call: Call) -> Optional[str]:
    """Shared check of a call against declared capabilities."""
    if call.op not in caps.ops:
        return f"does not serve op {call.op!r} (serves {', '.join(caps.ops) or 'nothing'})"
    if call.device.type not in caps.device_types:
        return f"does not run on device type {call.device.type!r} (runs on {', '.join(caps.device_types)})"
    if call.op == "topk" and call.dtype not in caps.dtypes:
        return f"does not serve dtype {call.dtype} (serves {', '.join(map(str, caps.dtypes))})"
    if caps.k_max is not None and call.k > caps.k_max:
        return f"serves k <= {caps.k_max}, got k={call.k}"
    if caps.max_width is not None and call.width > caps.max_width:
        return f"serves width <= {caps.max_width}, got {call.width}"
    if caps.max_rows is not None and call.rows > caps.max_rows:
        return f"serves rows <= {caps.max_rows}, got {call.rows}"
    if call.order not in caps.orders:
        return f"does not serve order {call.order!r}"
    if call.tie_break not in caps.tie_breaks:
        return f"does not serve tie_break {call.tie_break!r}"
    return None
