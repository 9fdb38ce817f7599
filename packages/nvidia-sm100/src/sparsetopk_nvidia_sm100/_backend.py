"""The ``nvidia-sm100`` backend object: capabilities, probe, dispatch.

The compiled module ``_C`` takes plain integers (data pointers, sizes,
strides, the raw CUDA stream handle), so it has no torch C++ ABI dependency.
"""

from __future__ import annotations

import functools
from typing import Optional

import torch

from sparsetopk.protocol import (
    Availability,
    Backend,
    Capabilities,
    MergeCall,
    TopKCall,
    capability_mismatch,
)

from . import __version__

K_MAX = 4096
MERGE_MAX_CANDIDATES = 16384  # R * k_in per row (one block sorts them in shared memory)
MIN_CC = (9, 0)

_DTYPE_CODE = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
_TIE = {"low": 0, "high": 1}
_ORDER = {"rank": 0, "index": 1, "any": 2}


@functools.lru_cache(maxsize=1)
def _ext():
    from . import _C  # noqa: PLC0415

    return _C


def _index_mode(t: Optional[torch.Tensor]):
    if t is None:
        return 0, 0, 0
    if t.dtype == torch.int32:
        return 1, t.data_ptr(), t.stride(0)
    if t.dtype == torch.int64:
        return 2, t.data_ptr(), t.stride(0)
    raise TypeError(f"index tensor dtype {t.dtype} (accepted: int32, int64)")


@functools.lru_cache(maxsize=1)
def _probe() -> Availability:
    try:
        _ext()
    except Exception as e:  # ImportError, or a broken build
        return Availability(False, f"nvidia-sm100 extension not importable: {type(e).__name__}: {e}")
    try:
        from cuda.bindings import driver  # noqa: PLC0415
    except Exception as e:
        return Availability(False, f"cuda-python (cuda.bindings) not importable: {type(e).__name__}: {e}")
    try:
        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return Availability(False, f"no usable CUDA driver: cuInit -> {err.name}")
        err, count = driver.cuDeviceGetCount()
        if err != driver.CUresult.CUDA_SUCCESS or count == 0:
            return Availability(False, "no CUDA device visible")
        best = None
        for i in range(count):
            err, dev = driver.cuDeviceGet(i)
            if err != driver.CUresult.CUDA_SUCCESS:
                continue
            A = driver.CUdevice_attribute
            e1, major = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev)
            e2, minor = driver.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev)
            if e1 == driver.CUresult.CUDA_SUCCESS and e2 == driver.CUresult.CUDA_SUCCESS:
                cc = (major, minor)
                best = cc if best is None or cc > best else best
                if cc >= MIN_CC:
                    return Availability(True)
        if best is None:
            return Availability(False, "could not read any device's compute capability")
        return Availability(False, f"needs compute capability >= 9.0, found {best[0]}.{best[1]}")
    except Exception as e:  # driver library missing (CPU-only machine) etc.
        return Availability(False, f"no usable CUDA driver: {type(e).__name__}: {e}")


@functools.lru_cache(maxsize=16)
def _device_cc(index: int):
    return torch.cuda.get_device_capability(index)


class NvidiaSm100Backend(Backend):
    name = "nvidia-sm100"
    version = __version__
    priority = 100
    interpreted = False
    capabilities = Capabilities(
        vendor="nvidia",
        archs=("sm_90a", "sm_100a", "sm_103a"),
        device_types=("cuda",),
        ops=("topk", "merge"),
        k_max=K_MAX,
    )

    def probe(self) -> Availability:
        return _probe()

    def supports(self, call) -> Optional[str]:
        why = capability_mismatch(self.capabilities, call)
        if why is not None:
            return why
        dev = call.device
        if dev.type == "cuda":
            idx = dev.index if dev.index is not None else torch.cuda.current_device()
            cc = _device_cc(idx)
            if tuple(cc) < MIN_CC:
                return f"needs compute capability >= 9.0, device {idx} is {cc[0]}.{cc[1]}"
        if call.op == "merge" and call.width > MERGE_MAX_CANDIDATES:
            return f"merge serves R * k_in <= {MERGE_MAX_CANDIDATES} candidates per row, got {call.width}"
        return None

    # ------------------------------------------------------------------ topk
    def topk(self, call: TopKCall, indices: torch.Tensor, values: Optional[torch.Tensor]) -> None:
        C = _ext()
        s = call.scores
        rows, width = s.shape
        dev = s.device
        dev_idx = dev.index if dev.index is not None else torch.cuda.current_device()
        if s.stride(1) != 1 and width > 1:
            s = s.contiguous()
        out_i, out_v = indices, values
        tmp_i = indices.stride(1) != 1 and call.k > 1
        tmp_v = values is not None and values.stride(1) != 1 and call.k > 1
        if tmp_i:
            out_i = torch.empty((rows, call.k), dtype=torch.int32, device=dev)
        if tmp_v:
            out_v = torch.empty((rows, call.k), dtype=torch.float32, device=dev)
        if call.lengths is None:
            len_mode, len_ptr, len_stride, len_scalar = 0, 0, 0, 0
        elif isinstance(call.lengths, int):
            len_mode, len_ptr, len_stride, len_scalar = 3, 0, 0, int(call.lengths)
        else:
            len_mode, len_ptr, len_stride = _index_mode(call.lengths)
            len_scalar = 0
        st_mode, st_ptr, st_stride = _index_mode(call.starts)
        ws_bytes = C.workspace_bytes(rows, width, call.k, dev_idx, _DTYPE_CODE[s.dtype]) if rows else 0
        ws = self._workspace(ws_bytes, dev) if ws_bytes else None
        stream = torch.cuda.current_stream(dev).cuda_stream
        C.topk(
            scores=s.data_ptr(),
            dtype=_DTYPE_CODE[s.dtype],
            row_stride=s.stride(0),
            rows=rows,
            width=width,
            k=call.k,
            len_mode=len_mode,
            lengths=len_ptr,
            len_stride=len_stride,
            len_scalar=len_scalar,
            starts_mode=st_mode,
            starts=st_ptr,
            starts_stride=st_stride,
            scale=call.index_scale,
            offset=call.index_offset,
            force_begin=min(call.force_begin, 2**62),
            force_end=min(call.force_end, 2**62),
            tie=_TIE[call.tie_break],
            order=_ORDER[call.order],
            out_idx=out_i.data_ptr(),
            out_idx_stride=out_i.stride(0),
            out_val=out_v.data_ptr() if out_v is not None else 0,
            out_val_stride=out_v.stride(0) if out_v is not None else 0,
            workspace=ws.data_ptr() if ws is not None else 0,
            workspace_bytes=ws_bytes,
            device=dev_idx,
            stream=stream,
        )
        if tmp_i:
            indices.copy_(out_i)
        if tmp_v:
            values.copy_(out_v)

    @staticmethod
    def _workspace(nbytes: int, device: torch.device) -> torch.Tensor:
        # The split path's scratch (the caching allocator: no sync). One seam,
        # so a test can keep the buffer and read the estimate's outcome back
        # (packages/nvidia-sm100/tests/test_split_estimate_gpu.py).
        return torch.empty(nbytes, dtype=torch.uint8, device=device)

    # ----------------------------------------------------------------- merge
    def merge(self, call: MergeCall, indices: torch.Tensor, values: torch.Tensor) -> None:
        C = _ext()
        rows, R, k_in = call.indices.shape
        dev = call.indices.device
        dev_idx = dev.index if dev.index is not None else torch.cuda.current_device()
        ii = call.indices.reshape(rows, R * k_in)
        vv = call.values.reshape(rows, R * k_in)
        if ii.stride(1) != 1:
            ii = ii.contiguous()
        if vv.stride(1) != 1:
            vv = vv.contiguous()
        if vv.dtype != torch.float32:
            vv = vv.to(torch.float32)
        out_i, out_v = indices, values
        tmp_i = indices.stride(1) != 1 and call.k > 1
        tmp_v = values is None or (values.stride(1) != 1 and call.k > 1)
        if tmp_i:
            out_i = torch.empty((rows, call.k), dtype=torch.int32, device=dev)
        if tmp_v:
            out_v = torch.empty((rows, call.k), dtype=torch.float32, device=dev)
        stream = torch.cuda.current_stream(dev).cuda_stream
        C.merge(
            in_idx=ii.data_ptr(),
            in_idx_stride=ii.stride(0),
            in_val=vv.data_ptr(),
            in_val_stride=vv.stride(0),
            rows=rows,
            R=R,
            k_in=k_in,
            k=call.k,
            tie=_TIE[call.tie_break],
            order=_ORDER[call.order],
            out_idx=out_i.data_ptr(),
            out_idx_stride=out_i.stride(0),
            out_val=out_v.data_ptr(),
            out_val_stride=out_v.stride(0),
            device=dev_idx,
            stream=stream,
        )
        if tmp_i:
            indices.copy_(out_i)
        if tmp_v and values is not None:
            values.copy_(out_v)
