"""Host side of the triton-portable backend: launch choices and kernel launches.

Every choice here is made from shapes, dtypes, Python ints and cached device
properties only: no device reads, no host sync, so every call can be captured
in a CUDA graph. Temporary buffers come from torch's caching allocator on the
current stream.
"""

from __future__ import annotations

import functools
import os

import torch
import triton

from . import kernels as K

# Tunables (the benchmark script sweeps some of them). Keyed on device
# properties where it matters: programs per SM for the split schemes.
CONFIG = {
    "smallk_max": 128,  # k <= this: stream scheme; else radix scheme
    "stream_tile": 4096,  # columns per stream tile (compiled)
    "stream_tile_interp": 4096,  # columns per tile under TRITON_INTERPRET
    "radix_tile": 2048,
    "radix_tile_interp": 2048,
    "radix_min_chunk": 8192,  # smallest column range one radix program owns
    "radix_min_chunk_interp": 1 << 30,  # interpreter: no row split by default (pure overhead there)
    "stream_min_chunk": 8192,
    "stream_min_chunk_interp": 1 << 30,
    # split long rows until rows * nsplit >= this * SMs. Radix: 4 measured better than 2
    # on the H200 in 6 of the 9 k=2048 cells (e.g. 16x1M 1017 -> 653 us, 64x1M 3445 -> 2917 us).
    "programs_per_sm": 2,
    "radix_programs_per_sm": 4,
    "merge_max_np": 16384,  # largest next_pow2(R * k_in) merged in one program
}

MAX_SPLIT = 512  # programs per row at most (the radix write kernel's SBLOCK)

# Test hook: "stream" / "radix" forces a scheme for every topk call.
FORCE_SCHEME = os.environ.get("SPARSETOPK_TRITON_SCHEME", "")


def interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _fix_interpreter_index() -> None:
    """Work around a Triton-interpreter incompatibility with numpy >= 2.3.

    The interpreter represents scalars as 1-element arrays and implements
    ``tensor.__index__`` (used by ``range(lo, hi)`` with tensor bounds) as
    ``int(array)``, which numpy 2.3+ rejects for arrays with ndim > 0. We wrap
    its patch function so ``__index__`` reads the single element. Only ever
    applied under TRITON_INTERPRET; compiled kernels are untouched.
    """
    import numpy as np
    from triton.runtime import interpreter as _interp

    orig = getattr(_interp, "_patch_lang_tensor", None)
    if orig is None or getattr(orig, "_sparsetopk_index_fix", False):
        return

    def patched(tensor, scope):
        orig(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    patched._sparsetopk_index_fix = True
    _interp._patch_lang_tensor = patched


def _fast_interpreter_xor_reduce() -> None:
    """Speed shim for the Triton interpreter: ``tl.sort``/``tl.topk`` swap pairs
    through ``xor_sum``, whose custom combine function the interpreter evaluates
    element by element in Python (~30 s for one 2k-column topk). We route that
    one combine function to ``numpy.bitwise_xor.reduce`` (same result, exactly).
    Interpreter only."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter as _interp

    ops = getattr(_interp, "ReduceOps", None)
    xor_fn = getattr(tl.standard, "_xor_combine", None)
    if ops is None or xor_fn is None or getattr(ops.apply_impl, "_sparsetopk_xor_fix", False):
        return
    orig = ops.apply_impl

    def apply_impl(self, input):
        if self.combine_fn == xor_fn and self.axis is not None:
            data = input[0].handle.data
            return self.to_tensor(np.bitwise_xor.reduce(data, axis=self.axis, keepdims=self.keep_dims),
                                  input[0].dtype)
        return orig(self, input)

    apply_impl._sparsetopk_xor_fix = True
    ops.apply_impl = apply_impl


def _patch_lang_once_per_launch() -> None:
    """Speed shim for the Triton interpreter: it re-patches the whole
    ``triton.language`` namespace (inspect.getmembers over the modules) on
    every nested ``@triton.jit`` call, ~3 ms each, and ``tl.sort``/``tl.topk``
    make hundreds of nested calls. The patches are identical and stay in place
    for the whole launch, so we patch ``tl`` and ``tl.core`` once at launch
    start and make the nested calls no-ops. Interpreter only."""
    import types

    import triton.language as tl
    from triton.runtime import interpreter as _interp

    orig_patch = getattr(_interp, "_patch_lang", None)
    ge = getattr(_interp, "GridExecutor", None)
    scope_cls = getattr(_interp, "_LangPatchScope", None)
    if orig_patch is None or ge is None or scope_cls is None or getattr(orig_patch, "_sparsetopk_once", False):
        return
    state = {"depth": 0, "patched": False}
    both = types.FunctionType((lambda: None).__code__, {"tl": tl, "core": tl.core})

    def patch_lang(fn):
        if state["depth"] > 0:
            if state["patched"]:
                return scope_cls()
            state["patched"] = True
            return orig_patch(both)
        return orig_patch(fn)

    orig_call = ge.__call__

    def call(self, *args, **kwargs):
        state["depth"] += 1
        if state["depth"] == 1:
            state["patched"] = False
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            state["depth"] -= 1
            if state["depth"] == 0:
                state["patched"] = False

    patch_lang._sparsetopk_once = True
    _interp._patch_lang = patch_lang
    ge.__call__ = call


if interpreted():
    _fix_interpreter_index()
    _fast_interpreter_xor_reduce()
    _patch_lang_once_per_launch()


@functools.cache
def _device_props(device_type: str, index: int):
    """(SM/CU count, warp size) of a device, cached; (4, 32) under the interpreter."""
    if device_type == "cpu":
        return 4, 32
    p = torch.cuda.get_device_properties(index)
    warp = getattr(p, "warp_size", 32) or 32
    return int(p.multi_processor_count), int(warp)


def device_props(t: torch.Tensor):
    idx = t.device.index if t.device.index is not None else torch.cuda.current_device() if t.is_cuda else 0
    return _device_props(t.device.type, idx)


def _warps(block_elems: int, warp_size: int, lo: int = 4, hi: int = 16) -> int:
    # ~8 int64 keys per thread at most before spilling gets costly.
    w = triton.next_power_of_2(max(1, block_elems // (8 * warp_size)))
    if warp_size == 64:
        hi = min(hi, 16)
    return max(lo, min(hi, w))


def _cfg(name: str) -> int:
    if interpreted() and (name + "_interp") in CONFIG:
        return CONFIG[name + "_interp"]
    return CONFIG[name]


def _geometry_args(call):
    scores = call.scores
    if isinstance(call.lengths, torch.Tensor):
        lens, len_int, len_mode = call.lengths, 0, 2
    elif call.lengths is None:
        lens, len_int, len_mode = scores, 0, 0
    else:
        lens, len_int, len_mode = scores, int(call.lengths), 1
    starts = call.starts if call.starts is not None else scores
    fb = min(int(call.force_begin), 2**31 - 1)
    fe = min(int(call.force_end), 2**33)
    return (scores, scores.stride(0), starts, lens, len_int, call.width, call.index_scale,
            call.index_offset, fb, fe), dict(HAS_STARTS=int(call.starts is not None), LEN_MODE=len_mode)


def _order_code(order: str) -> int:
    return {"rank": 0, "index": 1, "any": 2}[order]


def _split(rows: int, width: int, tile: int, min_chunk: int, sms: int, per_sm: int) -> int:
    """Programs per row. Programs take the row's tiles round-robin, so the work
    spreads over all of them whatever each row's (device-side) length is."""
    target = per_sm * sms
    ntiles = triton.cdiv(max(width, 1), tile)
    nsplit = 1
    if rows < target:
        nsplit = min(triton.cdiv(target, max(rows, 1)), triton.cdiv(max(width, 1), min_chunk), MAX_SPLIT)
    return max(1, min(nsplit, ntiles))


def kp_for(k: int) -> int:
    """Key-block size for k: a power of two >= k, bucketed to few compiled variants
    (16, 64, then next_pow2). tl.topk needs >= 2."""
    if k <= 16:
        return 16
    if k <= 64:
        return 64
    return triton.next_power_of_2(k)


def scheme_for(call) -> str:
    if FORCE_SCHEME in ("stream", "radix"):
        return FORCE_SCHEME
    return "stream" if call.k <= CONFIG["smallk_max"] else "radix"


# ---------------------------------------------------------------------------
# topk
# ---------------------------------------------------------------------------


def topk(call, indices: torch.Tensor, values):
    rows = call.rows
    if rows == 0:
        return
    assert indices.stride(1) == 1 and (values is None or values.stride(1) == 1)
    if scheme_for(call) == "stream":
        _topk_stream(call, indices, values)
    else:
        _topk_radix(call, indices, values)


def _topk_stream(call, indices, values):
    rows, width, k = call.rows, call.width, call.k
    sms, warp = device_props(call.scores)
    KP = kp_for(k)
    tile = _cfg("stream_tile")
    # few distinct tile sizes (each is a compiled variant): 256, 1024, 2048, 4096, tile
    BLOCK = min(tile, next((b for b in (256, 1024, 2048, 4096) if width <= b), tile))
    BLOCK = max(KP, BLOCK)
    nsplit = _split(rows, width, BLOCK, max(_cfg("stream_min_chunk"), BLOCK), sms, CONFIG["programs_per_sm"])
    gargs, gkw = _geometry_args(call)
    write_vals = values is not None
    vt = values if write_vals else indices
    order = _order_code(call.order)
    tie_low = int(call.tie_break == "low")
    write_vals = int(write_vals)
    nw = _warps(BLOCK, warp)
    if nsplit == 1:
        K._stream_kernel[(rows, 1)](
            *gargs, indices, indices.stride(0), vt, vt.stride(0), indices, k,
            **gkw, TIE_LOW=tie_low, ORDER=order, WRITE_VALS=write_vals, SPLIT=False,
            KP=KP, BLOCK=BLOCK, num_warps=nw)
        return
    part = torch.empty((rows, nsplit, KP), dtype=torch.int64, device=call.scores.device)
    K._stream_kernel[(rows, nsplit)](
        *gargs, indices, indices.stride(0), vt, vt.stride(0), part, k,
        **gkw, TIE_LOW=tie_low, ORDER=order, WRITE_VALS=write_vals, SPLIT=True,
        KP=KP, BLOCK=BLOCK, num_warps=nw)
    K._stream_final_kernel[(rows,)](
        part, nsplit, indices, indices.stride(0), vt, vt.stride(0), k,
        TIE_LOW=tie_low, ORDER=order, WRITE_VALS=write_vals, KP=KP,
        num_warps=_warps(2 * KP, warp))


def _topk_radix(call, indices, values):
    rows, width, k = call.rows, call.width, call.k
    dev = call.scores.device
    sms, warp = device_props(call.scores)
    BLOCK = _cfg("radix_tile")
    nsplit = _split(rows, width, BLOCK, max(_cfg("radix_min_chunk"), BLOCK), sms,
                    CONFIG["radix_programs_per_sm"])
    ntiles = triton.cdiv(max(width, 1), BLOCK)
    gargs, gkw = _geometry_args(call)
    tie_low = int(call.tie_break == "low")
    rank = call.order == "rank"
    if values is not None:
        vt, write_vals = values, True
    elif rank:
        vt, write_vals = torch.empty((rows, k), dtype=torch.float32, device=dev), True
    else:
        vt, write_vals = indices, False
    hist = torch.zeros((rows, 4, 256), dtype=torch.int32, device=dev)
    cnt = torch.empty((rows, ntiles, 2), dtype=torch.int32, device=dev)
    grid = (rows, nsplit)
    nw = _warps(BLOCK, warp, hi=8)
    for p in range(4):
        K._radix_hist_kernel[grid](*gargs, hist, k, **gkw, P=p, BLOCK=BLOCK, num_warps=nw)
    K._radix_count_kernel[grid](*gargs, hist, cnt, k, ntiles, **gkw, BLOCK=BLOCK, num_warps=nw)
    SBLOCK = MAX_SPLIT
    K._radix_write_kernel[grid](
        *gargs, hist, cnt, indices, indices.stride(0), vt, vt.stride(0), k, ntiles,
        **gkw, TIE_LOW=tie_low, WRITE_VALS=int(write_vals), BLOCK=BLOCK, SBLOCK=SBLOCK,
        PBLOCK=1024, num_warps=nw)
    if rank:
        KP = kp_for(k)
        K._rank_sort_kernel[(rows,)](
            indices, indices.stride(0), vt, vt.stride(0), k, TIE_LOW=tie_low, KP=KP,
            num_warps=_warps(KP, warp))


# ---------------------------------------------------------------------------
# merge
# ---------------------------------------------------------------------------


def merge_np(call) -> int:
    n = call.indices.shape[1] * call.indices.shape[2]
    return max(triton.next_power_of_2(max(n, 2)), kp_for(call.k), 64)


def merge(call, indices: torch.Tensor, values: torch.Tensor):
    rows = call.rows
    if rows == 0:
        return
    assert indices.stride(1) == 1 and (values is None or values.stride(1) == 1)
    _, warp = device_props(call.indices)
    n = call.indices.shape[1] * call.indices.shape[2]
    in_idx = call.indices.contiguous()
    in_val = call.values.contiguous()
    if in_val.dtype != torch.float32:
        in_val = in_val.float()
    NP = merge_np(call)
    KP = kp_for(call.k)
    scratch = torch.empty((rows, NP), dtype=torch.int64, device=in_idx.device)
    write_vals = values is not None
    vt = values if write_vals else indices
    K._merge_kernel[(rows,)](
        in_idx, in_val, n, scratch, indices, indices.stride(0), vt, vt.stride(0), call.k,
        TIE_LOW=int(call.tie_break == "low"), ORDER=_order_code(call.order), WRITE_VALS=int(write_vals),
        NP=NP, KP=KP, num_warps=_warps(NP, warp))
