"""Launch code shared by every driver: parameter structures (mirrors of the C
structs in csrc/stk_amd_kernels.hip) and the choice of kernel per call."""

from __future__ import annotations

import ctypes
from typing import Optional

import torch

SMALL_K_MAX = 64  # stk_decode_topk_*: one workgroup of four waves per row
LARGE_K_MAX = 4096  # stk_radix_topk_*
MERGE_LDS_MAX = 4096  # candidates per row sorted in LDS; beyond: global workspace
RADIX_BLOCK = 512
MERGE_BLOCK = 512
MAX_GRID = 1 << 16  # workgroups per launch; the kernels loop over rows
FULL_ROW = 1 << 62  # "no lengths": clamped to W_r * index_scale on the device

_DTYPE_SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_TIE = {"low": 0, "high": 1}
_ORDER = {"rank": 0, "index": 1, "any": 2}


class TopKParams(ctypes.Structure):
    _fields_ = [
        ("scores", ctypes.c_void_p),
        ("lengths", ctypes.c_void_p),
        ("starts", ctypes.c_void_p),
        ("out_idx", ctypes.c_void_p),
        ("out_val", ctypes.c_void_p),
        ("row_stride", ctypes.c_int64),
        ("width", ctypes.c_int64),
        ("rows", ctypes.c_int64),
        ("length_const", ctypes.c_int64),
        ("lengths_stride", ctypes.c_int64),
        ("starts_stride", ctypes.c_int64),
        ("out_idx_stride", ctypes.c_int64),
        ("out_val_stride", ctypes.c_int64),
        ("scale", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("force_begin", ctypes.c_int64),
        ("force_end", ctypes.c_int64),
        ("k", ctypes.c_int32),
        ("tie", ctypes.c_int32),
        ("order", ctypes.c_int32),
        ("lengths_i64", ctypes.c_int32),
        ("starts_i64", ctypes.c_int32),
        ("grid", ctypes.c_int32),
    ]


class MergeParams(ctypes.Structure):
    _fields_ = [
        ("in_idx", ctypes.c_void_p),
        ("in_val", ctypes.c_void_p),
        ("out_idx", ctypes.c_void_p),
        ("out_val", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("rows", ctypes.c_int64),
        ("m", ctypes.c_int64),
        ("out_idx_stride", ctypes.c_int64),
        ("out_val_stride", ctypes.c_int64),
        ("k", ctypes.c_int32),
        ("tie", ctypes.c_int32),
        ("order", ctypes.c_int32),
        ("grid", ctypes.c_int32),
        ("mp", ctypes.c_int32),
        ("pad_", ctypes.c_int32),
    ]


def next_pow2(v: int) -> int:
    p = 1
    while p < v:
        p <<= 1
    return p


def _row_writable(t: Optional[torch.Tensor]):
    """(tensor the kernel writes, tensor to copy back into or None)."""
    if t is None:
        return None, None
    if t.stride(-1) == 1 or t.shape[-1] <= 1:
        return t, None
    tmp = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    return tmp, t


def topk_kernel_name(call) -> str:
    kind = "decode" if call.k <= SMALL_K_MAX else "radix"
    return f"stk_{kind}_topk_{_DTYPE_SUFFIX[call.scores.dtype]}"


def launch_topk(driver, call, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
    rows, width, k = call.rows, call.width, call.k
    if rows == 0:
        return
    scores = call.scores
    out_i, back_i = _row_writable(indices)
    out_v, back_v = _row_writable(values)
    p = TopKParams()
    p.scores = scores.data_ptr()
    p.row_stride = scores.stride(0) if rows > 1 else width
    p.width = width
    p.rows = rows
    lengths = call.lengths
    if isinstance(lengths, torch.Tensor):
        p.lengths = lengths.data_ptr()
        p.lengths_stride = lengths.stride(0) if lengths.numel() > 1 else 1
        p.lengths_i64 = int(lengths.dtype == torch.int64)
        p.length_const = 0
    else:
        p.lengths = None
        p.lengths_stride = 0
        p.length_const = FULL_ROW if lengths is None else int(lengths)
    starts = call.starts
    if starts is not None:
        p.starts = starts.data_ptr()
        p.starts_stride = starts.stride(0) if starts.numel() > 1 else 1
        p.starts_i64 = int(starts.dtype == torch.int64)
    p.out_idx = out_i.data_ptr()
    p.out_idx_stride = out_i.stride(0) if rows > 1 else k
    if out_v is not None:
        p.out_val = out_v.data_ptr()
        p.out_val_stride = out_v.stride(0) if rows > 1 else k
    p.scale = call.index_scale
    p.offset = call.index_offset
    p.force_begin = call.force_begin
    p.force_end = call.force_end
    p.k = k
    p.tie = _TIE[call.tie_break]
    p.order = _ORDER[call.order]
    grid = min(rows, MAX_GRID)
    p.grid = grid
    block = 4 * driver.wave if k <= SMALL_K_MAX else RADIX_BLOCK
    driver.launch(scores.device, topk_kernel_name(call), grid, block, p)
    if back_i is not None:
        back_i.copy_(out_i)
    if back_v is not None:
        back_v.copy_(out_v)


def launch_merge(driver, call, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
    rows, k = call.rows, call.k
    if rows == 0:
        return
    m = call.indices.shape[1] * call.indices.shape[2]
    ii = call.indices.reshape(rows, m).contiguous()
    vv = call.values.reshape(rows, m).contiguous()
    if vv.dtype != torch.float32:
        vv = vv.float()
    out_i, back_i = _row_writable(indices)
    out_v, back_v = _row_writable(values)
    mp = next_pow2(max(m, 1))
    grid = min(rows, MAX_GRID)
    p = MergeParams()
    p.in_idx = ii.data_ptr()
    p.in_val = vv.data_ptr()
    p.out_idx = out_i.data_ptr()
    p.out_idx_stride = out_i.stride(0) if rows > 1 else k
    if out_v is not None:
        p.out_val = out_v.data_ptr()
        p.out_val_stride = out_v.stride(0) if rows > 1 else k
    p.rows = rows
    p.m = m
    p.k = k
    p.tie = _TIE[call.tie_break]
    p.order = _ORDER[call.order]
    p.grid = grid
    p.mp = mp
    workspace = None
    if mp <= MERGE_LDS_MAX:
        name = "stk_merge_lds"
    else:
        name = "stk_merge_global"
        workspace = torch.empty(grid * mp, dtype=torch.int64, device=ii.device)
        p.workspace = workspace.data_ptr()
    driver.launch(ii.device, name, grid, MERGE_BLOCK, p)
    if back_i is not None:
        back_i.copy_(out_i)
    if back_v is not None:
        back_v.copy_(out_v)
