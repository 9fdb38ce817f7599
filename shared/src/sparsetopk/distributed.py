"""Context-parallel exact top-k over ``torch.distributed``.

Each rank of a process group holds one shard of every row's columns (the
indexer scores of its slice of the context). :func:`topk` selects the exact
top-k of the *unsharded* rows:

1. local selection with :func:`sparsetopk.topk` (``return_values=True``,
   ``order="any"``): the best ``k`` columns of the shard, as global column
   indices with their canonical fp32 scores;
2. one collective: ``all_gather`` of the packed candidates (int32 indices
   and the fp32 values' bits in one int32 buffer), or ``all_to_all`` when
   ``owner`` says which rank receives which rows;
3. :func:`sparsetopk.merge` of the R candidate lists (SPEC §2), so the answer
   equals ``sparsetopk.topk`` on the unsharded rows, bit for bit.

Layouts (``W`` = local width, ``world`` = group size, global width ``W*world``):

- ``"strided"``: local column ``j`` of rank ``r`` is global ``j*world + r``.
  This is the core's shard view (``index_scale=world, index_offset=rank``),
  so lengths, forced columns and ties are handled by the core exactly.
- ``"blocked"``: local column ``j`` of rank ``r`` is global ``r*W + j``. The
  core's shard view cannot express an offset, so this module maps it: the
  non-forced valid columns of a row are the global range
  ``[force_begin, L - force_end)``, whose part on rank ``r`` is one contiguous
  local range ``[a_r, b_r)`` (``a_r`` a host int, ``b_r`` a per-row device
  tensor). The local call selects over that range with no forcing (a column
  slice plus per-row lengths), indices are shifted by ``r*W + a_r``, and the
  forced columns (``[0, min(force_begin, L))`` and ``[L - force_end, L)``,
  known from ``L`` alone) are added as one more candidate list with value
  ``+inf`` before the merge. Forced-ness is thus decided by the global index
  against the global length, as SPEC §1 requires.

Semantics are SPEC §1 on the unsharded row: ``lengths`` are global lengths
(``[rows]`` int tensor on the local device, or a Python int), clamped to
``[0, W*world]``; ``force_begin`` / ``force_end`` count global columns;
``tie_break`` decides exact ties by global index across ranks.

No host synchronisation; buffers for the exchange are cached per shape and
reused (``reuse_buffers=False`` turns that off). Every rank of the group must
call with the same ``k``, options, local shape and dtype (a collective).
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .api import TopK
from .api import merge as _merge
from .api import topk as _topk
from .protocol import INT32_MAX, ORDERS, TIE_BREAKS
from .validation import as_int as _as_int
from .validation import check_k, check_scores, choice, row_tensor

__all__ = ["topk", "PendingTopK", "clear_buffers"]

LAYOUTS = ("strided", "blocked")

_BUFFERS: Dict[tuple, torch.Tensor] = {}
_OWNER_PLANS: Dict[tuple, object] = {}
_CACHE_MAX = 32


def clear_buffers() -> None:
    """Forget the cached exchange buffers and owner plans."""
    _BUFFERS.clear()
    _OWNER_PLANS.clear()


def _capturing(device: torch.device) -> bool:
    if device.type != "cuda":
        return False
    try:
        return torch.cuda.is_current_stream_capturing()
    except Exception:  # pragma: no cover - no CUDA runtime
        return False


def _buffer(tag: str, shape: Tuple[int, ...], dtype: torch.dtype, device: torch.device, reuse: bool) -> torch.Tensor:
    """A scratch tensor, reused across calls of the same shape when allowed.

    Calls are stream-ordered on the caller's current stream and every
    collective here is waited on, so the next call's writes follow this
    call's reads. Buffers are not created while a CUDA graph is captured
    (they would live in the graph's private pool); warm up first.
    """
    if not reuse or _capturing(device):
        return torch.empty(shape, dtype=dtype, device=device)
    key = (tag, shape, dtype, device)
    buf = _BUFFERS.get(key)
    if buf is None:
        if len(_BUFFERS) >= _CACHE_MAX:
            _BUFFERS.pop(next(iter(_BUFFERS)))
        buf = _BUFFERS[key] = torch.empty(shape, dtype=dtype, device=device)
    return buf




# ---------------------------------------------------------------------------
# owner plans: which rows go where (host-known, cached)
# ---------------------------------------------------------------------------


class _OwnerPlan:
    """Host-side routing of rows to owner ranks for ``all_to_all``.

    ``perm`` lists the rows grouped by owner (ascending row order inside a
    group), ``send_counts[d]`` rows go to rank ``d``; this rank receives
    ``len(mine)`` rows from every rank, ``mine`` in ascending row order.
    """

    def __init__(self, owners: Tuple[int, ...], rank: int, world: int, device: torch.device):
        self.rows = len(owners)
        order = sorted(range(self.rows), key=lambda r: owners[r])
        self.identity = order == list(range(self.rows))
        self.send_counts = [0] * world
        for o in owners:
            self.send_counts[o] += 1
        mine = [r for r in range(self.rows) if owners[r] == rank]
        self.n_mine = len(mine)
        self.perm = None if self.identity else torch.tensor(order, dtype=torch.int64, device=device)
        self.mine = torch.tensor(mine, dtype=torch.int64, device=device)


def _owner_plan(owner, rows: int, rank: int, world: int, device: torch.device) -> _OwnerPlan:
    if isinstance(owner, torch.Tensor):
        if owner.device.type != "cpu":
            raise ValueError(
                f"owner must be host data (a Python int, a sequence of ints or a CPU tensor) so routing needs no "
                f"device sync, got a tensor on {owner.device}"
            )
        if owner.dim() == 0:
            owner = int(owner)
        else:
            owner = owner.tolist()
    if isinstance(owner, (list, tuple)):
        if len(owner) != rows:
            raise ValueError(f"owner must name one rank per row ({rows} rows), got {len(owner)} entries")
        owners = tuple(_as_int("owner[]", o) for o in owner)
    else:
        o = _as_int("owner", owner)
        owners = (o,) * rows
    for o in owners:
        if not 0 <= o < world:
            raise ValueError(f"owner ranks must be in [0, world) = [0, {world}), got {o}")
    key = (owners, rank, world, device)
    plan = _OWNER_PLANS.get(key)
    if plan is None:
        plan = _OwnerPlan(owners, rank, world, device)
        if not _capturing(device):
            if len(_OWNER_PLANS) >= _CACHE_MAX:
                _OWNER_PLANS.pop(next(iter(_OWNER_PLANS)))
            _OWNER_PLANS[key] = plan
    return plan


# ---------------------------------------------------------------------------
# collectives
# ---------------------------------------------------------------------------


def _all_gather(recv: torch.Tensor, send: torch.Tensor, group, async_op: bool):
    # 1-D views: every backend (gloo, NCCL) accepts the concatenated form.
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(recv.view(-1), send.view(-1), group=group, async_op=async_op)


# ---------------------------------------------------------------------------
# forced columns of the blocked layout
# ---------------------------------------------------------------------------


def _forced_list(length, n: int, k: int, fb: int, fe: int, global_width: int, tie_break: str,
                 device: torch.device) -> Tuple[torch.Tensor, torch.Tensor]:
    """The best ``k`` forced global columns of each row, value ``+inf``.

    ``length``: global lengths (int64 tensor ``[n]``, or a Python int) already
    clamped to ``[0, global_width]``. Forced set: ``[0, B) + [E, L)`` with
    ``B = min(fb, L)``, ``E = max(L - fe, B)``; best first by the tie rule.
    """
    p = torch.arange(k, device=device, dtype=torch.int64).unsqueeze(0)  # [1, k]
    if isinstance(length, torch.Tensor):
        L = length.unsqueeze(1)
        B = L.clamp(max=fb)
        E = torch.maximum(L - fe, B)
    else:
        L = length
        B = min(fb, L)
        E = max(L - fe, B)
    n_end = L - E
    n_forced = B + n_end
    if tie_break == "low":  # ascending global index
        g = torch.where(p < B, p, p - B + E)
    else:  # descending global index
        g = torch.where(p < n_end, L - 1 - p, B - 1 - (p - n_end))
    valid = p < n_forced
    g = g.expand(n, k)
    valid = valid.expand(n, k)
    idx = torch.where(valid, g, torch.full_like(g, -1)).to(torch.int32)
    val = torch.where(valid, torch.full((n, k), float("inf"), device=device),
                      torch.full((n, k), float("-inf"), device=device))
    return idx, val


# ---------------------------------------------------------------------------
# the public function
# ---------------------------------------------------------------------------


def topk(
    local_scores: torch.Tensor,
    k: int,
    *,
    group=None,
    lengths: Union[torch.Tensor, int, None] = None,
    force_begin: int = 0,
    force_end: int = 0,
    tie_break: str = "low",
    order: str = "rank",
    return_values: bool = False,
    layout: str = "strided",
    owner: Union[int, Sequence[int], torch.Tensor, None] = None,
    backend: Optional[str] = None,
    out=None,
    reuse_buffers: bool = True,
    async_op: bool = False,
) -> Union[TopK, PendingTopK]:
    """Exact global top-k of rows whose columns are sharded over ``group``.

    ``local_scores``: ``[rows, W]`` (float32/bfloat16/float16, inner stride 1),
    this rank's shard; every rank has the same ``rows`` and ``W``. ``layout``
    says how local columns map to global ones (module docstring). ``lengths``,
    ``force_begin``, ``force_end``, ``tie_break``, ``order``,
    ``return_values``, ``backend`` and ``out`` mean what they mean for
    :func:`sparsetopk.topk` on the unsharded ``[rows, W*world]`` rows.

    ``owner``: None (every rank receives every row, via ``all_gather``), a
    rank (every row to that rank), or one rank per row (a sequence or CPU
    tensor; host data so routing needs no device sync). With ``owner``, one
    ``all_to_all`` sends each row's candidates only to its owner, and each
    rank returns the rows it owns, in ascending row order (``[n_owned, k]``;
    ``[0, k]`` on a rank that owns none). The owner routing is cached per
    owner list: call once before capturing a CUDA graph.

    Returns ``TopK(indices int32 [rows or n_owned, k], values float32 or None)``
    with global column indices, bit-identical to ``sparsetopk.topk`` on the
    unsharded rows (SPEC §2 composition law). With ``async_op=True`` it
    returns a :class:`PendingTopK` as soon as the collective is issued;
    ``.wait()`` gives the ``TopK`` (overlap other work in between; async
    calls use fresh buffers, never the cached ones).
    """
    if not dist.is_available() or not dist.is_initialized():
        raise ValueError("torch.distributed must be initialised (init_process_group) before sparsetopk.distributed.topk")
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this process is not a member of group")
    rows, width = check_scores("local_scores", local_scores)
    device = local_scores.device
    k = check_k(k)
    fb = _as_int("force_begin", force_begin, minimum=0)
    fe = _as_int("force_end", force_end, minimum=0)
    choice("tie_break", tie_break, TIE_BREAKS)
    choice("order", order, ORDERS)
    choice("layout", layout, LAYOUTS)
    if not isinstance(return_values, bool):
        raise TypeError(f"return_values must be a bool, got {type(return_values).__name__}")
    global_width = width * world
    if global_width > INT32_MAX:
        raise ValueError(
            f"local width {width} over {world} ranks gives global indices up to {global_width - 1}; "
            f"int32 outputs accept at most {INT32_MAX - 1}"
        )
    if lengths is not None:
        if isinstance(lengths, torch.Tensor):
            lengths = row_tensor("lengths", lengths, rows, device)
        else:
            lengths = min(max(_as_int("lengths", lengths), 0), global_width)
    if not isinstance(async_op, bool):
        raise TypeError(f"async_op must be a bool, got {type(async_op).__name__}")
    if async_op:
        reuse_buffers = False  # a second call could overwrite buffers still in flight
    plan = None if owner is None else _owner_plan(owner, rows, rank, world, device)
    fb = min(fb, global_width)
    fe = min(fe, global_width)

    # -- 1. local candidates: packed [2, rows, k] int32 (indices, value bits)
    send = _buffer("send", (2, rows, k), torch.int32, device, reuse_buffers)
    s_idx, s_val = send[0], send[1].view(torch.float32)
    forced = None
    if layout == "strided":
        _topk(local_scores, k, lengths=lengths, index_scale=world, index_offset=rank, force_begin=fb,
              force_end=fe, tie_break=tie_break, order="any", return_values=True, backend=backend,
              out=(s_idx, s_val))
    else:
        base = rank * width
        a = min(max(fb - base, 0), width)  # first non-forced local column (host int)
        if isinstance(lengths, torch.Tensor):
            g_len = lengths.to(torch.int64).clamp(0, global_width)
            loc_len = g_len - (fe + base + a)
        else:
            g_len = global_width if lengths is None else lengths
            loc_len = g_len - (fe + base + a)
        if a >= width or rows == 0:
            s_idx.fill_(-1)
            s_val.fill_(float("-inf"))
        else:
            part = local_scores[:, a:]
            _topk(part, k, lengths=loc_len, tie_break=tie_break, order="any", return_values=True,
                  backend=backend, out=(s_idx, s_val))
            shift = base + a
            if shift:
                s_idx.copy_(torch.where(s_idx >= 0, s_idx + shift, s_idx))
        if fb or fe:
            forced = g_len

    # -- 2. one collective
    if plan is None:
        n_out = rows
        recv = _buffer("gather", (world, 2, rows, k), torch.int32, device, reuse_buffers)
        work = _all_gather(recv, send, group, async_op)
        c_idx = recv[:, 0].permute(1, 0, 2)
        c_val = recv[:, 1].view(torch.float32).permute(1, 0, 2)
    else:
        n_out = plan.n_mine
        packed = send.permute(1, 0, 2)  # [rows, 2, k]
        packed = packed.index_select(0, plan.perm) if plan.perm is not None else packed.contiguous()
        recv = _buffer("a2a", (world * n_out, 2, k), torch.int32, device, reuse_buffers)
        work = dist.all_to_all_single(recv, packed, [n_out] * world, plan.send_counts, group=group, async_op=async_op)
        recv = recv.view(world, n_out, 2, k)
        c_idx = recv[:, :, 0].permute(1, 0, 2)
        c_val = recv[:, :, 1].view(torch.float32).permute(1, 0, 2)
        if isinstance(forced, torch.Tensor):
            forced = forced.index_select(0, plan.mine)
    f_list = None
    if forced is not None:
        # Every receiving rank knows the global lengths of its rows, so the
        # forced columns need no exchange: one more candidate list (built
        # while the collective is in flight when async_op=True).
        f_list = _forced_list(forced, n_out, k, fb, fe, global_width, tie_break, device)
    if isinstance(out, torch.Tensor):  # indices only: merge always writes values
        out = (out, torch.empty(out.shape, dtype=torch.float32, device=out.device))

    # -- 3. merge
    def finish() -> TopK:
        if work is not None:
            work.wait()
        ci, cv = c_idx, c_val
        if f_list is not None:
            ci = torch.cat([ci, f_list[0].unsqueeze(1)], 1)
            cv = torch.cat([cv, f_list[1].unsqueeze(1)], 1)
        res = _merge(ci, cv, k, tie_break=tie_break, order=order, backend=backend, out=out)
        return TopK(res.indices, res.values if return_values else None)

    if async_op:
        return PendingTopK(finish)
    return finish()


class PendingTopK:
    """What ``topk(..., async_op=True)`` returns: the exchange is in flight;
    :meth:`wait` waits for it (``Work.wait``: on GPUs the current stream waits
    for the collective, no host sync) and runs the merge, once."""

    def __init__(self, finish):
        self._finish = finish
        self._result: Optional[TopK] = None

    def wait(self) -> TopK:
        if self._result is None:
            self._result = self._finish()
            self._finish = None
        return self._result
