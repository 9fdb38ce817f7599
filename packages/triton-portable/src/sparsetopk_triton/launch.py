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
    "lane_max": 64,  # k <= this: lane scheme (one read, 32-bit hot loop) with stream fallback
    "lane_rows": 32,  # tile = lane_rows x L columns (L = 64 for KP 16, 128 for KP 64)
    "lane_rows_interp": 2,  # interpreter: small tiles so multi-tile / flush paths run
    "lane_warps": 4,
    # k > smallk_max, width >= sample_min_ratio * k and >= sample_min_width, rows >=
    # sample_min_rows, rows * width >= sample_min_cols: sample scheme (threshold estimate,
    # one gather read, exact select of the candidates), radix fallback for flagged rows
    "sample_min_ratio": 8,
    "sample_min_rows": 8,
    "sample_min_width": 1 << 16,
    "sample_min_cols": 1 << 22,
    "sample_size": 4096,
    "sample_size_interp": 256,
    # lengths / starts on the device and at most this many rows: the sample kernel sums
    # the valid columns and sends every row to radix below sample_min_cols (scheme_for
    # can only bound them by the width); larger calls skip the sum (rows^2 loads)
    "sample_gate_max_rows": 1024,
    # the estimate keeps at least this many samples above it (its count's spread is
    # ~1 / sqrt of that): at k = 129-512 on 1M rows only 2-5 did, and 10-20 % of the rows
    # fell back to radix. Candidate slots grow to twice what it asks. 0: off.
    "sample_min_above": 16,
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
    # the sample scheme's radix fallback splits a row its estimate missed as if only
    # rows / this many were flagged (misses are rare; unflagged rows' programs return
    # at once). Rows its gate flagged (all rows of the call) keep the split for all
    # rows. 1 = every flagged row split for all rows: one missed 1M row on 9 programs
    # (64 rows) cost ~0.5 ms (notes/triton-portable.md)
    "fallback_miss_div": 8,
    # the sample's candidate sort and rank read only the chunks its gather filled (0: all
    # capacity slots, as before)
    "sample_sort_by_count": 1,
}

MAX_SPLIT = 512  # programs per row at most (the radix write kernel's SBLOCK)

# Test hook: "lane" / "stream" / "radix" forces a scheme for every topk call
# ("lane" only where k <= 64; larger k falls back to stream/radix).
FORCE_SCHEME = os.environ.get("SPARSETOPK_TRITON_SCHEME", "")
# Test hook: keep the lane scheme's per-row fallback flags of the last call in LAST_LANE_FLAGS.
KEEP_LANE_FLAGS = False
LAST_LANE_FLAGS = None
LAST_SAMPLE_FLAGS = None

# Variant survey (tools/variants.py): SPARSETOPK_TRITON_VARIANT_LOG=path appends one
# JSON line per launch with the kernel's compile key for a cuda:90 target (the
# signature types, the specialisation attributes Triton derives from the arguments,
# constexprs and num_warps). SPARSETOPK_TRITON_DRYRUN=1 also skips every launch and
# fills the outputs from the reference backend, and SPARSETOPK_TRITON_FAKE_SMS sets
# the SM count, so a CPU run of the conformance suite with the interpreter budgets
# lifted lists the variants a GPU run compiles.
VARIANT_LOG = os.environ.get("SPARSETOPK_TRITON_VARIANT_LOG", "")
DRYRUN = os.environ.get("SPARSETOPK_TRITON_DRYRUN", "0") not in ("", "0")
_FAKE_SMS = int(os.environ.get("SPARSETOPK_TRITON_FAKE_SMS", "0") or 0)
_binders = {}


def _log_variant(kern, args, kw) -> None:
    import json

    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    if kern not in _binders:
        fn = kern
        if not hasattr(fn, "signature"):  # InterpretedFunction: rebuild the JITFunction
            from triton.runtime.jit import JITFunction

            fn = JITFunction(kern.fn, **{a: v for a, v in kern.kwargs.items() if a.startswith("do_not")})
        be = make_backend(GPUTarget("cuda", 90, 32))
        _binders[kern] = fn, create_function_from_signature(fn.signature, fn.params, be)
    fn, binder = _binders[kern]
    _, spec, opts = binder(*args, **kw)
    names = [p.name for p in fn.params]
    sig = {n: s[0] for n, s in zip(names, spec)}
    consts = {n: (s[1] if not hasattr(s[1], "value") else s[1].value) for n, s in zip(names, spec)
              if s[0] == "constexpr"}
    attrs = {n: s[1] for n, s in zip(names, spec) if s[0] != "constexpr" and isinstance(s[1], str)}
    rec = dict(kernel=fn.__name__, sig=sig, consts=consts, attrs=attrs, num_warps=opts.get("num_warps", 4))
    with open(VARIANT_LOG, "a") as f:
        f.write(json.dumps(rec, sort_keys=True) + "\n")


def _launch(kern, grid, *args, **kw) -> None:
    if VARIANT_LOG:
        _log_variant(kern, args, kw)
    if not DRYRUN:
        kern[grid](*args, **kw)


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
    if _FAKE_SMS:
        return _FAKE_SMS, 32
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
    if interpreted() and not DRYRUN and (name + "_interp") in CONFIG:
        return CONFIG[name + "_interp"]
    return CONFIG[name]


def _as_i32_ptr(t: torch.Tensor):
    """(int32 tensor, mode): int64 tensors are passed as their int32 view (mode 2)
    and read as pairs in the kernel, so both dtypes use one compiled variant."""
    if t.dtype == torch.int64:
        return t.contiguous().view(torch.int32), 2
    return t, 1


def _geometry_args(call, dummy):
    scores = call.scores
    if isinstance(call.lengths, torch.Tensor):
        lens, mode = _as_i32_ptr(call.lengths)
        len_int, len_mode = 0, 1 + mode
    elif call.lengths is None:
        lens, len_int, len_mode = dummy, 0, 0
    else:
        lens, len_int, len_mode = dummy, int(call.lengths), 1
    if call.starts is not None:
        starts, has_starts = _as_i32_ptr(call.starts)
    else:
        starts, has_starts = dummy, 0
    fb = min(int(call.force_begin), 2**31 - 1)
    fe = min(int(call.force_end), 2**33)
    return (scores, scores.stride(0), starts, lens, len_int, call.width, call.index_scale,
            call.index_offset, fb, fe), dict(HAS_STARTS=has_starts, LEN_MODE=len_mode)


def _no_values(indices: torch.Tensor) -> torch.Tensor:
    """Placeholder float32 values pointer when no values are written (WRITE_VALS=0;
    never read or written), so calls with and without values share the variant."""
    return torch.empty((indices.shape[0], 1), dtype=torch.float32, device=indices.device)


def _order_code(order: str) -> int:
    return {"rank": 0, "index": 1, "any": 2}[order]


def _output_args(call, indices, values):
    """(values tensor or placeholder, WRITE_VALS, ORDER, TIE_LOW) of a call."""
    vt = values if values is not None else _no_values(indices)
    return vt, int(values is not None), _order_code(call.order), int(call.tie_break == "low")


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


def _row_bound(call) -> int:
    """Most valid columns a row can hold: the width, or fewer under one int length."""
    if call.lengths is None or isinstance(call.lengths, torch.Tensor):
        return call.width
    t = max(int(call.lengths) - call.index_offset, 0)
    return min(call.width, -(-t // call.index_scale))


def scheme_for(call) -> str:
    if FORCE_SCHEME in ("stream", "radix"):
        return FORCE_SCHEME
    if FORCE_SCHEME == "sample" and call.k > CONFIG["smallk_max"]:
        return "sample"
    if call.k <= min(CONFIG["lane_max"], 64):
        return "lane"
    if call.k <= CONFIG["smallk_max"]:
        return "stream"
    # The sample's fixed cost (sorting 4096 samples, then 4 next_pow2(k) candidate
    # slots) is ~180 us at 4-16 rows and grows ~0.8 us a row past a few hundred rows;
    # radix costs ~45 us per million columns. H100, 2026-12-06 (bench_triton.py
    # --schemes, fp32 N(0, 1), sample vs radix): 16 x 1M k = 2048 272 vs 676 us,
    # 64 x 1M 566 vs 3003, 4 x 1M 205 vs 188, 4 x 40K 181 vs 45; decode rows at
    # k = 129-512 446 vs 87 (512 x 1344), 3305 vs 943 (4096 x 4096), 513 vs 392
    # (512 x 16384). Tensor lengths are on the device: then `width` stands for the row
    # here, and the sample kernel's gate checks sample_min_cols on the valid columns.
    n = _row_bound(call)
    if (n >= CONFIG["sample_min_ratio"] * call.k and call.rows >= CONFIG["sample_min_rows"]
            and n >= CONFIG["sample_min_width"] and call.rows * n >= CONFIG["sample_min_cols"]):
        return "sample"
    return "radix"


# ---------------------------------------------------------------------------
# topk
# ---------------------------------------------------------------------------


def topk(call, indices: torch.Tensor, values):
    rows = call.rows
    if rows == 0:
        return
    assert indices.stride(1) == 1 and (values is None or values.stride(1) == 1)
    sch = scheme_for(call)
    if sch == "lane":
        _topk_lane(call, indices, values)
    elif sch == "stream":
        _topk_stream(call, indices, values)
    elif sch == "sample":
        _topk_sample(call, indices, values)
    else:
        _topk_radix(call, indices, values)
    if DRYRUN:
        _reference().topk(call, indices, values)


@functools.cache
def _reference():
    from sparsetopk.reference import ReferenceBackend

    return ReferenceBackend()


def stream_shape(width: int, k: int):
    """(KP, BLOCK, NG, C, SUB) of the stream scheme: few buckets (each is compiled)."""
    KP = kp_for(k)
    tile = _cfg("stream_tile")
    BLOCK = min(tile, next((b for b in (512, 2048) if width <= b), tile))
    BLOCK = max(BLOCK, 4 * KP)
    NG = min(BLOCK, 2 * KP)  # column groups for the pre-filter threshold
    C = 4 * KP  # candidate slots after the pre-filter
    # piece size of the exact fallback; under the interpreter one piece (its cost
    # there is per op, not per element, and the GPU code size does not matter)
    SUB = BLOCK if interpreted() and not DRYRUN else C
    return KP, BLOCK, NG, C, SUB


def lane_shape(k: int):
    """(KP, L, R, CAP) of the lane scheme: KP in {16, 64} -> two compiled buckets."""
    KP = kp_for(k)
    L = 64 if KP <= 16 else 128  # lanes: the KP-th largest lane maximum bounds the k-th key
    R = _cfg("lane_rows")
    CAP = 4 * KP  # candidate buffer slots per program
    return KP, L, R, CAP


def _topk_lane(call, indices, values):
    global LAST_LANE_FLAGS
    rows, width, k = call.rows, call.width, call.k
    sms, warp = device_props(call.scores)
    KP, L, R, CAP = lane_shape(k)
    BLOCK = R * L
    nsplit = _split(rows, width, BLOCK, max(_cfg("stream_min_chunk"), BLOCK), sms, CONFIG["programs_per_sm"])
    gargs, gkw = _geometry_args(call, indices)
    vt, write_vals, order, tie_low = _output_args(call, indices, values)
    dev = call.scores.device
    buf = torch.empty((rows * nsplit, CAP), dtype=torch.int64, device=dev)
    part = torch.empty((rows, nsplit, KP), dtype=torch.int64, device=dev) if nsplit > 1 else buf
    flags = torch.zeros((rows,), dtype=torch.int32, device=dev)
    _launch(K._lane_kernel, (rows, nsplit),
            *gargs, indices, indices.stride(0), vt, vt.stride(0), part, buf, flags, k,
            **gkw, TIE_LOW=tie_low, ORDER=order, WRITE_VALS=int(write_vals), SPLIT=int(nsplit > 1),
            KP=KP, L=L, R=R, CAP=CAP, num_warps=CONFIG["lane_warps"])
    if nsplit > 1:
        _launch(K._stream_final_kernel, (rows,),
                part, nsplit, indices, indices.stride(0), vt, vt.stride(0), k,
                TIE_LOW=tie_low, ORDER=order, WRITE_VALS=int(write_vals), KP=KP,
                num_warps=_warps(2 * KP, warp))
    # exact fallback for the rows the lane kernel flagged (a no-op program elsewhere)
    _topk_stream(call, indices, values, flags=flags, nsplit=1)
    if KEEP_LANE_FLAGS:
        LAST_LANE_FLAGS = flags


def _topk_stream(call, indices, values, flags=None, nsplit=None):
    rows, width, k = call.rows, call.width, call.k
    sms, warp = device_props(call.scores)
    KP, BLOCK, NG, C, SUB = stream_shape(width, k)
    if nsplit is None:
        nsplit = _split(rows, width, BLOCK, max(_cfg("stream_min_chunk"), BLOCK), sms, CONFIG["programs_per_sm"])
    gargs, gkw = _geometry_args(call, indices)
    vt, write_vals, order, tie_low = _output_args(call, indices, values)
    nw = _warps(BLOCK, warp)
    dev = call.scores.device
    scr = torch.empty((rows * nsplit, C), dtype=torch.int64, device=dev)
    part = torch.empty((rows, nsplit, KP), dtype=torch.int64, device=dev) if nsplit > 1 else scr
    _launch(K._stream_kernel, (rows, nsplit),
            *gargs, indices, indices.stride(0), vt, vt.stride(0), part, scr,
            flags if flags is not None else indices, k,
            **gkw, TIE_LOW=tie_low, ORDER=order, WRITE_VALS=write_vals, SPLIT=int(nsplit > 1),
            USE_FLAG=int(flags is not None),
            KP=KP, BLOCK=BLOCK, NG=NG, C=C, SUB=SUB, num_warps=nw)
    if nsplit > 1:
        _launch(K._stream_final_kernel, (rows,),
                part, nsplit, indices, indices.stride(0), vt, vt.stride(0), k,
                TIE_LOW=tie_low, ORDER=order, WRITE_VALS=write_vals, KP=KP,
                num_warps=_warps(2 * KP, warp))


def sample_capacity(k: int, width: int, ss: int) -> int:
    """Candidate slots per row of the sample scheme (a multiple of CH): 4 x next_pow2(k),
    and at least twice the columns that sample_min_above samples stand for."""
    above = 2 * CONFIG["sample_min_above"] * triton.cdiv(max(width, 1), ss)
    return max(CH, 4 * triton.next_power_of_2(k), triton.next_power_of_2(above))


def _topk_sample(call, indices, values):
    global LAST_SAMPLE_FLAGS
    rows, width, k = call.rows, call.width, call.k
    dev = call.scores.device
    sms, warp = device_props(call.scores)
    BLOCK = _cfg("radix_tile")
    nsplit = _split(rows, width, BLOCK, max(_cfg("radix_min_chunk"), BLOCK), sms,
                    CONFIG["radix_programs_per_sm"])
    gargs, gkw = _geometry_args(call, indices)
    tie_low = int(call.tie_break == "low")
    SS = _cfg("sample_size")
    capc = sample_capacity(k, width, SS)
    est = torch.empty((rows,), dtype=torch.int32, device=dev)
    kkt = torch.empty((rows,), dtype=torch.int32, device=dev)
    cnt = torch.zeros((rows,), dtype=torch.int32, device=dev)
    cidx = torch.full((rows, capc), -1, dtype=torch.int32, device=dev)
    cval = torch.empty((rows, capc), dtype=torch.float32, device=dev)
    # lengths or starts on the device: the kernel checks sample_min_cols on the valid
    # columns (not when the scheme is forced: that mode is there to test the fast path)
    gate = (CONFIG["sample_min_cols"] if rows <= CONFIG["sample_gate_max_rows"] and FORCE_SCHEME != "sample"
            and (isinstance(call.lengths, torch.Tensor) or call.starts is not None) else 0)
    _launch(K._sample_kernel, (rows,), *gargs, est, kkt, k, capc, CONFIG["sample_min_above"], rows, gate,
            **gkw, SS=SS, RB=256, num_warps=_warps(SS, warp, hi=8))
    _launch(K._gather_kernel, (rows, nsplit), *gargs, est, cnt, cidx, cval, capc, **gkw, BLOCK=BLOCK,
            num_warps=_warps(BLOCK, warp, hi=8))
    # exact whenever every key >= the estimate was gathered and there are >= kk of them;
    # the fallback's programs test that themselves (kernels._fallback_share)
    fallback = (cnt, kkt, capc)
    if values is not None:
        vt, write_vals = values, 1
    elif call.order != "any":
        vt, write_vals = torch.empty((rows, k), dtype=torch.float32, device=dev), 1
    else:
        vt, write_vals = _no_values(indices), 0
    nch = capc // CH
    scr = torch.empty((rows, capc), dtype=torch.int64, device=dev)
    nw = _warps(CH, warp)
    # only the chunks that hold gathered candidates (none on rows the gate flagged)
    by_count = CONFIG["sample_sort_by_count"]
    _launch(K._sort_chunks_kernel, (rows, nch), cidx, capc, cval, capc, capc, scr, nch, cnt, by_count,
            TIE_LOW=tie_low, MODE=0, CH=CH, num_warps=nw)
    _launch(K._rank_scatter_kernel, (rows, nch), scr, nch, indices, indices.stride(0), vt, vt.stride(0), k,
            cnt, by_count, TIE_LOW=tie_low, MODE=0, WRITE_VALS=write_vals, CH=CH, LOG_CH=LOG_CH, PB=256,
            num_warps=nw)
    # flagged rows: the radix scheme (index order), a no-op program for the others
    _topk_radix(call, indices, values, fallback=fallback, vt_wv=(vt, write_vals), reorder=False)
    if call.order == "rank":  # re-rank the fallback rows (idempotent on the others)
        _rank_order(indices, vt, k, tie_low, warp, values is not None)
    elif call.order == "index":
        _rank_order(indices, vt, k, tie_low, warp, values is not None, mode=1)
    if KEEP_LANE_FLAGS:  # test and bench hook (a host sync): the rows that fell back
        LAST_SAMPLE_FLAGS = ((cnt < kkt) | (cnt > capc)).to(torch.int32)


def _topk_radix(call, indices, values, fallback=None, vt_wv=None, reorder=True):
    rows, width, k = call.rows, call.width, call.k
    dev = call.scores.device
    sms, warp = device_props(call.scores)
    BLOCK = _cfg("radix_tile")

    def split(n):
        return _split(n, width, BLOCK, max(_cfg("radix_min_chunk"), BLOCK), sms, CONFIG["radix_programs_per_sm"])

    nsplit = split(rows)
    nsplit_all = nsplit
    if fallback is not None:  # (the sample's counts, its kk, its capacity): see _fallback_share
        nsplit = max(nsplit, split(max(1, rows // CONFIG["fallback_miss_div"])))
    ntiles = triton.cdiv(max(width, 1), BLOCK)
    gargs, gkw = _geometry_args(call, indices)
    tie_low = int(call.tie_break == "low")
    rank = call.order == "rank"
    if vt_wv is not None:
        vt, write_vals = vt_wv
    elif values is not None:
        vt, write_vals = values, True
    elif rank:
        vt, write_vals = torch.empty((rows, k), dtype=torch.float32, device=dev), True
    else:
        vt, write_vals = _no_values(indices), False
    hist = torch.zeros((rows, 4, 256), dtype=torch.int32, device=dev)
    cnt = torch.empty((rows, ntiles, 2), dtype=torch.int32, device=dev)
    grid = (rows, nsplit)
    nw = _warps(BLOCK, warp, hi=8)
    if fallback is not None:
        fl = (fallback[0], fallback[1], fallback[2], nsplit_all, 1)
    else:
        fl = (hist, hist, 0, nsplit, 0)
    for p in range(4):
        _launch(K._radix_hist_kernel, grid, *gargs, hist, k, *fl, **gkw, P=p, BLOCK=BLOCK, num_warps=nw)
    _launch(K._radix_count_kernel, grid, *gargs, hist, cnt, k, ntiles, *fl, **gkw, BLOCK=BLOCK,
            num_warps=nw)
    SBLOCK = MAX_SPLIT
    _launch(K._radix_write_kernel, grid,
        *gargs, hist, cnt, indices, indices.stride(0), vt, vt.stride(0), k, ntiles, *fl,
        **gkw, TIE_LOW=tie_low, WRITE_VALS=int(write_vals), BLOCK=BLOCK, SBLOCK=SBLOCK,
        PBLOCK=1024, num_warps=nw)
    if rank and reorder:
        _rank_order(indices, vt, k, tie_low, warp, values is not None)


CH = 512  # chunk of the chunked sorts (one compiled size)
LOG_CH = 9


def _rank_order(idx, val, k, tie_low, warp, write_vals, mode=0):
    """Sort each row's first k (index, value) slots in place into rank order (mode 0)
    or index order (mode 1, valid slots only): chunk sorts + rank scatter."""
    rows = idx.shape[0]
    nch = triton.cdiv(k, CH)
    scr = torch.empty((rows, nch * CH), dtype=torch.int64, device=idx.device)
    nw = _warps(CH, warp)
    _launch(K._sort_chunks_kernel, (rows, nch), idx, idx.stride(0), val, val.stride(0), k, scr, nch, idx, 0,
            TIE_LOW=tie_low, MODE=mode, CH=CH, num_warps=nw)
    _launch(K._rank_scatter_kernel, (rows, nch), scr, nch, idx, idx.stride(0), val, val.stride(0), k, idx, 0,
            TIE_LOW=tie_low, MODE=mode, WRITE_VALS=int(write_vals), CH=CH, LOG_CH=LOG_CH, PB=256,
            num_warps=nw)


# ---------------------------------------------------------------------------
# merge
# ---------------------------------------------------------------------------


MERGE_SMALL_N = 1024  # candidates per row served by the one-program merge (k <= 128)


def merge_np(call) -> int:
    """Candidate block of the one-program merge, 0 when the chunked merge serves the call."""
    n = call.indices.shape[1] * call.indices.shape[2]
    if n > MERGE_SMALL_N or call.k > CONFIG["smallk_max"]:
        return 0
    return 256 if n <= 256 else 1024


def merge(call, indices: torch.Tensor, values: torch.Tensor):
    rows = call.rows
    if rows == 0:
        return
    assert indices.stride(1) == 1 and (values is None or values.stride(1) == 1)
    _, warp = device_props(call.indices)
    n = call.indices.shape[1] * call.indices.shape[2]
    in_idx = call.indices.reshape(rows, n)
    in_val = call.values.reshape(rows, n)
    if in_idx.stride(1) != 1:
        in_idx = in_idx.contiguous()
    if in_val.dtype != torch.float32 or in_val.stride(1) != 1:
        in_val = in_val.float().contiguous()
    vt, write_vals, order, tie_low = _output_args(call, indices, values)
    k = call.k
    NP = merge_np(call)
    if NP:
        KP = kp_for(k)
        scratch = torch.empty((rows, NP), dtype=torch.int64, device=in_idx.device)
        _launch(K._merge_kernel, (rows,),
                in_idx, in_idx.stride(0), in_val, in_val.stride(0), n, scratch, indices, indices.stride(0),
                vt, vt.stride(0), k, TIE_LOW=tie_low, ORDER=order, WRITE_VALS=write_vals,
                NP=NP, KP=KP, num_warps=_warps(NP, warp))
    else:
        # chunked: sort chunks by (index, best value first), drop duplicate indices,
        # rank the survivors; index order re-sorts the k winners the same way.
        dev = in_idx.device
        nch = triton.cdiv(n, CH)
        s1 = torch.empty((rows, nch * CH), dtype=torch.int64, device=dev)
        s2 = torch.empty_like(s1)
        nw = _warps(CH, warp)
        _launch(K._sort_chunks_kernel, (rows, nch), in_idx, in_idx.stride(0), in_val, in_val.stride(0), n, s1,
                nch, in_idx, 0, TIE_LOW=tie_low, MODE=2, CH=CH, num_warps=nw)
        _launch(K._merge_dedupe_kernel, (rows, nch), s1, s2, nch, TIE_LOW=tie_low, CH=CH, LOG_CH=LOG_CH,
                num_warps=nw)
        if call.order == "index":
            oi = torch.empty((rows, k), dtype=torch.int32, device=dev)
            ov = torch.empty((rows, k), dtype=torch.float32, device=dev)
        else:
            oi, ov = indices, vt
        _launch(K._rank_scatter_kernel, (rows, nch), s2, nch, oi, oi.stride(0), ov, ov.stride(0), k, oi, 0,
                TIE_LOW=tie_low, MODE=0, WRITE_VALS=int(write_vals or call.order == "index"), CH=CH,
                LOG_CH=LOG_CH, PB=256, num_warps=nw)
        if call.order == "index":
            nch2 = triton.cdiv(k, CH)
            s3 = torch.empty((rows, nch2 * CH), dtype=torch.int64, device=dev)
            _launch(K._sort_chunks_kernel, (rows, nch2), oi, oi.stride(0), ov, ov.stride(0), k, s3, nch2,
                    oi, 0, TIE_LOW=tie_low, MODE=1, CH=CH, num_warps=nw)
            _launch(K._rank_scatter_kernel, (rows, nch2), s3, nch2, indices, indices.stride(0), vt, vt.stride(0),
                    k, indices, 0, TIE_LOW=tie_low, MODE=1, WRITE_VALS=int(write_vals), CH=CH, LOG_CH=LOG_CH, PB=256,
                    num_warps=nw)
    if DRYRUN:
        _reference().merge(call, indices, values)


# ---------------------------------------------------------------------------
# warm-up
# ---------------------------------------------------------------------------


def warmup(topk_shapes=(), merge_shapes=(), dtypes=(torch.float32,), device=None) -> int:
    """Compile, before any CUDA-graph capture, the kernel variants a serving config
    needs, by running each scheme once on zero inputs of those shapes.

    ``topk_shapes``: (rows, width, k) tuples; ``merge_shapes``: (rows, R, k_in, k).
    A variant depends only on the score dtype, the (width, k) bucket, whether a
    row is split over programs (rows, width) and, for merges, the candidate count;
    option flags (lengths, starts, shards, forced columns, tie rule, order,
    values) are runtime arguments, so one call per shape covers them all.
    Returns the number of calls made. Synchronises the device at the end."""
    from sparsetopk.validation import make_merge_call, make_topk_call

    dev = torch.device(device) if device is not None else (
        torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu"))
    n = 0
    for rows, width, k in topk_shapes:
        for dt in dtypes:
            s = torch.zeros((rows, width), dtype=dt, device=dev)
            call = make_topk_call(s, k, order="rank", return_values=True)
            idx = torch.empty((rows, k), dtype=torch.int32, device=dev)
            val = torch.empty((rows, k), dtype=torch.float32, device=dev)
            topk(call, idx, val)
            n += 1
    for rows, R, k_in, k in merge_shapes:
        i = torch.full((rows, R, k_in), -1, dtype=torch.int32, device=dev)
        v = torch.full((rows, R, k_in), float("-inf"), dtype=torch.float32, device=dev)
        for order in ("rank", "index"):  # index order adds kernels on the chunked path
            call = make_merge_call(i, v, k, order=order)
            idx = torch.empty((rows, k), dtype=torch.int32, device=dev)
            val = torch.empty((rows, k), dtype=torch.float32, device=dev)
            merge(call, idx, val)
            n += 1
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    return n
