"""Drop-in adapters for the top-k call shapes serving stacks use today.

Each function keeps the argument names, shapes and output format of the kernel
it replaces and is implemented on :func:`sparsetopk.topk`, so every installed
backend and the registry serve it. All of them are exact and deterministic
(SPEC §1): where the original leaves the order or the choice among tied
scores unspecified, the adapter's docstring says which one it returns.

Common differences from every original (the SPEC's canonical scores):

- NaN ranks as ``-inf`` (below every number, still a valid column); ``-0.0``
  ties with ``+0.0``; exact ties are broken by column index (``tie_break="low"``
  by default: the lower index wins).
- Lengths past the buffer are clipped to the buffer (never an out-of-bounds
  read); negative lengths count as 0.
- No host synchronisation: every per-row quantity is computed on the device
  with torch ops, so the adapters can be captured in a CUDA graph.

Adapters:

- vLLM DSA indexer: :func:`top_k_per_row_decode`, :func:`top_k_per_row_prefill`
- MSA / MiniMax: :func:`sparse_topk_select`
- FlashInfer: :func:`top_k`
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from .api import topk as _topk
from .validation import as_int as _as_int

__all__ = [
    "top_k_per_row_decode",
    "top_k_per_row_prefill",
    "sparse_topk_select",
    "top_k",
]

_INDEX_DTYPES = (torch.int32, torch.int64)


# ---------------------------------------------------------------------------
# small host-side helpers (shapes, dtypes and Python ints only)
# ---------------------------------------------------------------------------




def _check_index_tensor(name: str, t, device: torch.device) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be an int32/int64 torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{name} must have dtype int32 or int64, got {t.dtype}")
    if t.device != device:
        raise ValueError(f"{name} must be on the scores' device {device}, got {t.device}")
    return t


def _strided_rows(logits: torch.Tensor, num_rows: int, stride0: int, stride1: int) -> torch.Tensor:
    """The ``[num_rows, width]`` view the vLLM kernels read through
    ``logits + row * stride0 + col * stride1`` (width = ``logits.shape[-1]``)."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.dim() != 2:
        raise ValueError(f"logits must be 2-D [num_rows, width], got shape {list(logits.shape)}")
    stride1 = _as_int("stride1", stride1)
    if stride1 != 1:
        raise ValueError(f"stride1 must be 1 (sparsetopk reads rows with inner stride 1), got {stride1}")
    stride0 = _as_int("stride0", stride0, minimum=0)
    width = logits.shape[1]
    if stride0 == logits.stride(0) and num_rows <= logits.shape[0] and (width <= 1 or logits.stride(1) == 1):
        return logits[:num_rows]
    if num_rows == 0:
        return logits[:0]
    try:
        return torch.as_strided(logits, (num_rows, width), (stride0, 1), logits.storage_offset())
    except RuntimeError as exc:
        raise ValueError(
            f"stride0={stride0} with num_rows={num_rows} and width={width} reaches outside the storage of logits "
            f"(shape {list(logits.shape)}, strides {logits.stride()})"
        ) from exc


def _check_vllm_indices(indices, num_rows: int, top_k: int, device: torch.device) -> torch.Tensor:
    if not isinstance(indices, torch.Tensor):
        raise TypeError(f"indices must be an int32 torch.Tensor [num_rows, top_k], got {type(indices).__name__}")
    if indices.dtype != torch.int32:
        raise TypeError(f"indices must have dtype int32, got {indices.dtype}")
    if indices.dim() != 2 or indices.shape[0] < num_rows or indices.shape[1] != top_k:
        raise ValueError(
            f"indices must have shape [num_rows, top_k] = [{num_rows}, {top_k}] (extra rows are left alone), "
            f"got {list(indices.shape)}"
        )
    if indices.device != device:
        raise ValueError(f"indices must be on the logits' device {device}, got {indices.device}")
    return indices[:num_rows]


def _run_into(target: torch.Tensor, scores, k: int, **kw) -> None:
    """``sparsetopk.topk`` written into ``target`` (in place, no host sync)."""
    if target.is_contiguous():
        _topk(scores, k, out=target, **kw)
    else:
        target.copy_(_topk(scores, k, **kw).indices)


# ---------------------------------------------------------------------------
# vLLM DSA indexer
# ---------------------------------------------------------------------------


def _decode_lengths(seq_lens: torch.Tensor, next_n: int, num_rows: int) -> torch.Tensor:
    """Per-row lengths of vLLM's decode kernel, computed on the device.

    1-D ``seq_lens`` ``[B]`` (or any shape whose element count is not
    ``num_rows``, read flattened): ``seq_lens[r // next_n] - next_n + r % next_n + 1``.
    2-D ``seq_lens`` ``[B, next_n]`` with ``B * next_n == num_rows``: one length
    per row already (newer vLLM builds pass the causal lengths this way).
    """
    if seq_lens.dim() == 2 and seq_lens.numel() == num_rows and num_rows > 0:
        return seq_lens.reshape(num_rows)
    flat = seq_lens.reshape(-1)
    if flat.numel() * next_n < num_rows:
        raise ValueError(
            f"seq_lens has {flat.numel()} entries; with next_n={next_n} it covers {flat.numel() * next_n} rows, "
            f"fewer than num_rows={num_rows}"
        )
    r = torch.arange(num_rows, device=seq_lens.device, dtype=seq_lens.dtype)
    # The sparsetopk core clamps negative lengths to 0 (vLLM clips them at 0 too).
    return flat.index_select(0, torch.div(r, next_n, rounding_mode="floor")) + (r % next_n + (1 - next_n))


def top_k_per_row_decode(
    logits: torch.Tensor,
    next_n: int,
    seq_lens: torch.Tensor,
    indices: torch.Tensor,
    num_rows: int,
    stride0: int,
    stride1: int,
    top_k: int,
    *,
    order: str = "index",
    tie_break: str = "low",
    backend: Optional[str] = None,
) -> None:
    """vLLM ``torch.ops._C.top_k_per_row_decode`` (DSA indexer, decode).

    Mapping onto :func:`sparsetopk.topk`:

    - ``logits``: fp32 ``[num_rows, width]`` read through ``stride0`` (row
      stride, may exceed the width) and ``stride1`` (must be 1, else
      ``ValueError``); a ``torch.as_strided`` view is built when ``stride0``
      is not ``logits.stride(0)``. bf16/fp16 logits are accepted too.
    - row ``r``'s length: ``seq_lens[r // next_n] - next_n + r % next_n + 1``
      (MTP / speculative rows see a causal prefix), computed on the device; a
      negative length counts as 0 and one past ``width`` is clipped to it. A
      2-D ``seq_lens`` of shape ``[num_rows // next_n, next_n]`` is taken as
      one length per row, as newer vLLM builds pass it.
    - indices are relative to the row start (0-based columns), ``-1`` pads the
      slots a short row cannot fill; the answer is written **in place** into
      ``indices[:num_rows]`` (int32 ``[num_rows, top_k]``). Returns None.

    Order. The original returns, for a row with at most ``top_k`` columns,
    ``0, 1, ..., len-1`` then ``-1``; for longer rows, its radix-select order
    and its choice among tied logits are unspecified. This adapter returns
    every row in ascending column order (``order="index"``), which equals the
    original whenever the original's output is specified, and breaks exact
    ties by the lower column (``tie_break="low"``). Pass ``order="any"`` when
    only the set matters (cheapest), or ``order="rank"`` for best first.
    """
    num_rows = _as_int("num_rows", num_rows, minimum=0)
    next_n = _as_int("next_n", next_n, minimum=1)
    top_k = _as_int("top_k", top_k, minimum=1)
    scores = _strided_rows(logits, num_rows, stride0, stride1)
    seq_lens = _check_index_tensor("seq_lens", seq_lens, logits.device)
    target = _check_vllm_indices(indices, num_rows, top_k, logits.device)
    lengths = _decode_lengths(seq_lens, next_n, num_rows)
    _run_into(target, scores, top_k, lengths=lengths, order=order, tie_break=tie_break, backend=backend)
    return None


def top_k_per_row_prefill(
    logits: torch.Tensor,
    row_starts: torch.Tensor,
    row_ends: torch.Tensor,
    indices: torch.Tensor,
    num_rows: int,
    stride0: int,
    stride1: int,
    top_k: int,
    *,
    order: str = "index",
    tie_break: str = "low",
    backend: Optional[str] = None,
) -> None:
    """vLLM ``torch.ops._C.top_k_per_row_prefill`` (DSA indexer, prefill).

    Row ``r`` covers buffer columns ``[row_starts[r], row_ends[r])`` of its
    logits row (ragged rows packed into one buffer). Mapping onto
    :func:`sparsetopk.topk`: ``starts = row_starts``, ``lengths = row_ends -
    row_starts`` (computed on the device; a negative difference counts as 0,
    starts are clamped to ``[0, width]`` and an end past the buffer is clipped
    to it). Output indices are relative to the row start, ``-1`` pads short
    rows, written **in place** into ``indices[:num_rows]``. ``stride0`` /
    ``stride1`` as in :func:`top_k_per_row_decode` (``stride1`` must be 1).

    Order: ascending column (``order="index"``) with ties to the lower column,
    which equals the original for rows of at most ``top_k`` columns (where it
    writes ``0..len-1``) and fixes its unspecified order and tie choice for
    longer rows. ``order="any"`` / ``"rank"`` are available.
    """
    num_rows = _as_int("num_rows", num_rows, minimum=0)
    top_k = _as_int("top_k", top_k, minimum=1)
    scores = _strided_rows(logits, num_rows, stride0, stride1)
    row_starts = _check_index_tensor("row_starts", row_starts, logits.device)
    row_ends = _check_index_tensor("row_ends", row_ends, logits.device)
    for name, t in (("row_starts", row_starts), ("row_ends", row_ends)):
        if t.dim() != 1 or t.shape[0] < num_rows:
            raise ValueError(f"{name} must have shape [num_rows] = [{num_rows}], got {list(t.shape)}")
    target = _check_vllm_indices(indices, num_rows, top_k, logits.device)
    starts = row_starts[:num_rows]
    lengths = row_ends[:num_rows] - starts
    _run_into(target, scores, top_k, starts=starts, lengths=lengths, order=order, tie_break=tie_break, backend=backend)
    return None


# ---------------------------------------------------------------------------
# MSA / MiniMax block (page) selection
# ---------------------------------------------------------------------------


def sparse_topk_select(
    max_score: torch.Tensor,
    topk: int,
    num_valid_pages: Union[int, torch.Tensor, None] = None,
    output: Optional[torch.Tensor] = None,
    force_begin_blocks: int = 0,
    force_end_blocks: int = 0,
    max_score_layout: str = "THK",
    block_table: Optional[torch.Tensor] = None,
    *,
    tie_break: str = "low",
    backend: Optional[str] = None,
) -> torch.Tensor:
    """MSA / MiniMax ``sparse_topk_select``: pick ``topk`` pages per (token, head).

    - ``max_score``: per-page maximum scores, ``[T, H, K]`` (``"THK"``) or
      ``[H, K, T]`` (``"HKT"``), K = pages. Each (t, h) is one sparsetopk row
      of width K. THK rows are viewed in place (``reshape(T*H, K)``); HKT has
      the pages strided by T, so it costs one transposing copy to ``[T, H, K]``.
    - ``num_valid_pages``: None (all K pages), a Python int (every token), or
      an int tensor ``[T]`` (per token, shared by the heads) or ``[T, H]``;
      mapped to ``lengths`` (clamped to ``[0, K]``).
    - ``force_begin_blocks`` / ``force_end_blocks``: the first / last pages of
      the valid range are always selected (attention sinks, local window):
      ``force_begin`` / ``force_end``. When more pages are forced than
      ``topk``, the lower page ids win (``tie_break="low"``).
    - output: int32 ``[T, H, topk]``, the selected **logical page ids in
      ascending order** followed by a ``-1`` tail (``order="index"``), written
      into ``output`` when given (in place) and returned.
    - ``block_table``: when given, each selected logical page ``p`` of (t, h)
      becomes ``block_table[t, h, p]`` (physical page id); the ``-1`` tail stays
      ``-1``. Shapes ``[T, H, P]``, ``[T, 1, P]`` or ``[T, P]`` (shared by the
      heads), ``P >= K``. The output keeps the logical (ascending) order.

    Ties among equal page scores go to the lower page id; a NaN page score
    ranks as ``-inf`` (still selectable when fewer than ``topk`` pages score
    higher).
    """
    if not isinstance(max_score, torch.Tensor):
        raise TypeError(f"max_score must be a torch.Tensor, got {type(max_score).__name__}")
    if max_score.dim() != 3:
        raise ValueError(f"max_score must be 3-D ([T, H, K] or [H, K, T]), got shape {list(max_score.shape)}")
    if max_score_layout == "THK":
        T, H, K = max_score.shape
        thk = max_score
    elif max_score_layout == "HKT":
        H, K, T = max_score.shape
        thk = max_score.permute(2, 0, 1)
    else:
        raise ValueError(f"max_score_layout must be 'THK' or 'HKT', got {max_score_layout!r}")
    topk = _as_int("topk", topk, minimum=1)
    force_begin_blocks = _as_int("force_begin_blocks", force_begin_blocks, minimum=0)
    force_end_blocks = _as_int("force_end_blocks", force_end_blocks, minimum=0)
    device = max_score.device
    rows = T * H

    if K > 1 and thk.stride(2) != 1:
        thk = thk.contiguous()
    scores = thk.reshape(rows, K)  # a view when T, H merge; else one copy

    if num_valid_pages is None:
        lengths = None
    elif isinstance(num_valid_pages, torch.Tensor):
        nv = _check_index_tensor("num_valid_pages", num_valid_pages, device)
        if nv.dim() == 1 and nv.shape[0] == T:
            nv = nv.unsqueeze(1)
        if nv.dim() != 2 or nv.shape[0] != T or nv.shape[1] not in (1, H):
            raise ValueError(f"num_valid_pages must be an int or a tensor [T] or [T, H] = [{T}, {H}], got {list(nv.shape)}")
        lengths = nv.expand(T, H).reshape(rows)
    else:
        lengths = _as_int("num_valid_pages", num_valid_pages)

    bt = None
    if block_table is not None:
        bt = _check_index_tensor("block_table", block_table, device)
        if bt.dim() == 2:
            bt = bt.unsqueeze(1)
        if bt.dim() != 3 or bt.shape[0] != T or bt.shape[1] not in (1, H) or bt.shape[2] < K:
            raise ValueError(
                f"block_table must have shape [T, H, P], [T, 1, P] or [T, P] with T={T}, H={H}, P >= K={K}, "
                f"got {list(block_table.shape)}"
            )

    if output is not None:
        if not isinstance(output, torch.Tensor):
            raise TypeError(f"output must be an int32 torch.Tensor [T, H, topk], got {type(output).__name__}")
        if output.dtype != torch.int32:
            raise TypeError(f"output must have dtype int32, got {output.dtype}")
        if tuple(output.shape) != (T, H, topk):
            raise ValueError(f"output must have shape [T, H, topk] = [{T}, {H}, {topk}], got {list(output.shape)}")
        if output.device != device:
            raise ValueError(f"output must be on max_score's device {device}, got {output.device}")

    kw = dict(lengths=lengths, force_begin=force_begin_blocks, force_end=force_end_blocks,
              tie_break=tie_break, order="index", backend=backend)
    if bt is None:
        if output is None:
            return _topk(scores, topk, **kw).indices.view(T, H, topk)
        if output.is_contiguous():
            _topk(scores, topk, out=output.view(rows, topk), **kw)
        else:
            output.copy_(_topk(scores, topk, **kw).indices.view(T, H, topk))
        return output

    sel = _topk(scores, topk, **kw).indices.view(T, H, topk)
    phys = torch.gather(bt.expand(T, H, bt.shape[2]), 2, sel.clamp(min=0).to(torch.int64))
    mapped = torch.where(sel >= 0, phys.to(torch.int32), sel)
    if output is None:
        return mapped
    output.copy_(mapped)
    return output


# ---------------------------------------------------------------------------
# FlashInfer
# ---------------------------------------------------------------------------


def top_k(input: torch.Tensor, k: int, sorted: bool = False, *, tie_break: str = "low",
          backend: Optional[str] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """FlashInfer ``flashinfer.top_k(input, k, sorted=False) -> (values, indices)``.

    - ``input``: ``[batch, d]`` float32 / float16 / bfloat16 (a 1-D ``[d]`` is
      treated as one row and returns 1-D outputs). ``k`` must be ``<= d``.
    - returns ``values`` (``input``'s dtype, gathered from ``input``, so they
      are the original numbers, ``-0.0`` and NaN included) and ``indices``
      (int64), both ``[batch, k]``.
    - ``sorted=True``: best first (``order="rank"``): descending value, exact
      ties to the lower index. ``sorted=False``: the same exact set in the
      backend's deterministic order (``order="any"``); FlashInfer's unsorted
      order is unspecified, so compare sets.

    Differences: FlashInfer's radix order ranks NaN above every number, this
    adapter ranks NaN as ``-inf`` (canonical scores); among tied values
    FlashInfer's choice is unspecified, here the lower index wins.
    """
    if not isinstance(input, torch.Tensor):
        raise TypeError(f"input must be a torch.Tensor, got {type(input).__name__}")
    if input.dim() not in (1, 2):
        raise ValueError(f"input must be 2-D (batch_size, d) or 1-D (d), got shape {list(input.shape)}")
    if not isinstance(sorted, bool):
        raise TypeError(f"sorted must be a bool, got {type(sorted).__name__}")
    k = _as_int("k", k, minimum=1)
    x = input if input.dim() == 2 else input.unsqueeze(0)
    d = x.shape[1]
    if k > d:
        raise ValueError(f"k must be <= input.shape[-1] = {d}, got {k}")
    if d > 1 and x.stride(1) != 1:
        x = x.contiguous()
    idx = _topk(x, k, order="rank" if sorted else "any", tie_break=tie_break, backend=backend).indices
    idx64 = idx.to(torch.int64)
    values = torch.gather(x, 1, idx64)
    if input.dim() == 1:
        return values.squeeze(0), idx64.squeeze(0)
    return values, idx64
