"""Helpers of the conformance suite: run a backend, run the oracle, compare.

Every comparison is exact: indices equal, values bitwise equal (float32
canonical scores; padding -1 / -inf). For ``order="any"`` the set is compared
plus the layout rules (valid slots first, -1 padding last, values matching
their indices) and determinism.
"""

from __future__ import annotations

import math
import os
from typing import Optional

import numpy as np
import oracle
import pytest
import torch

import sparsetopk
from sparsetopk.validation import make_merge_call, make_topk_call

DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ORDERS = ("rank", "index", "any")
TIES = ("low", "high")
DIRT = (math.nan, math.inf, 1e30, -math.inf, 3e38, -0.0)

# Sizes the Triton interpreter (a backend with ``interpreted = True``) is
# given: a row-column budget per call and the largest width/k. Everything
# larger is skipped for such a backend with a reason, so its whole suite stays
# within a few minutes on a small CPU.
# Such a backend also makes one call per sub-case (no return_values=False /
# repeat calls, except the determinism check of order="any"), and
# tests/conformance/conftest.py samples 1 in INTERP_SAMPLE parametrizations of
# the larger matrices. (Override with SPARSETOPK_INTERP_MAX_WIDTH / _K /
# _CELLS / _SAMPLE; SPARSETOPK_INTERP_SAMPLE=1 runs every parametrization.)
INTERP_MAX_WIDTH = int(os.environ.get("SPARSETOPK_INTERP_MAX_WIDTH", 2100))
INTERP_MAX_K = int(os.environ.get("SPARSETOPK_INTERP_MAX_K", 300))
INTERP_MAX_CELLS = int(os.environ.get("SPARSETOPK_INTERP_MAX_CELLS", 12_000))
INTERP_SAMPLE = int(os.environ.get("SPARSETOPK_INTERP_SAMPLE", 3))


TOPK_OPTS = (
    "lengths",
    "starts",
    "index_scale",
    "index_offset",
    "force_begin",
    "force_end",
    "tie_break",
    "order",
)


# --------------------------------------------------------------------------
# conversions
# --------------------------------------------------------------------------
def to_np(scores: torch.Tensor) -> np.ndarray:
    """Logical float32 values of a score tensor (bf16/fp16 widen exactly)."""
    return np.ascontiguousarray(scores.detach().to(torch.float32).cpu().numpy())


def opt_np(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().to(torch.int64).numpy()
    return x


def u32(a) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32)).view(np.uint32)


def scores_tensor(arr: np.ndarray, dtype: torch.dtype, device) -> torch.Tensor:
    """float32 numpy -> torch ``dtype`` on ``device`` (round to nearest even)."""
    return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)).to(dtype).to(device)


def lengths_tensor(vals, dtype, device) -> torch.Tensor:
    return torch.tensor(list(vals), dtype=dtype, device=device)


# --------------------------------------------------------------------------
# skipping: what a backend does not serve, what is too big for the interpreter
# --------------------------------------------------------------------------
class _Tracker:
    """Per-test record of sub-cases checked and sub-cases a backend does not
    serve (tests/conformance/conftest.py resets it and reports it)."""

    def __init__(self):
        self.reset()

    def reset(self):
        self.checks = 0
        self.skipped = []


TRACK = _Tracker()


def interp_reason(bk, rows: int, width: int, k: int) -> Optional[str]:
    if bk.interpreted and (width > INTERP_MAX_WIDTH or k > INTERP_MAX_K or rows * width > INTERP_MAX_CELLS):
        return (
            f"{bk.name} is interpreted: case rows={rows} width={width} k={k} is past the "
            f"interpreter budget (width<={INTERP_MAX_WIDTH}, k<={INTERP_MAX_K}, rows*width<={INTERP_MAX_CELLS})"
        )
    return None


def topk_unserved(bk, scores, k, **opts) -> Optional[str]:
    """The backend's reason for not serving this topk call, or None."""
    call = make_topk_call(scores, k, **{o: opts[o] for o in TOPK_OPTS if o in opts}, return_values=True)
    why = bk.backend.supports(call)
    return None if why is None else f"{bk.name} does not serve this call: {why}"


def merge_unserved(bk, indices, values, k, **opts) -> Optional[str]:
    call = make_merge_call(indices, values, k, **opts)
    why = bk.backend.supports(call)
    return None if why is None else f"{bk.name} does not serve this merge: {why}"


def _topk_reason(bk, scores, k, **opts) -> Optional[str]:
    return interp_reason(bk, scores.shape[0], scores.shape[1], k) or topk_unserved(bk, scores, k, **opts)


def _merge_reason(bk, indices, values, k, **opts) -> Optional[str]:
    return interp_reason(bk, indices.shape[0], indices.shape[1] * indices.shape[2], k) or merge_unserved(
        bk, indices, values, k, **opts
    )


def require_topk(bk, scores, k, **opts) -> None:
    """Skip the whole test if the backend does not serve this call."""
    why = _topk_reason(bk, scores, k, **opts)
    if why:
        pytest.skip(why)


def require_merge(bk, indices, values, k, **opts) -> None:
    why = _merge_reason(bk, indices, values, k, **opts)
    if why:
        pytest.skip(why)


def topk_served(bk, scores, k, **opts) -> bool:
    """Soft check for one sub-case of a test: False (and the reason recorded)
    if the backend does not serve it; the test goes on with the others."""
    why = _topk_reason(bk, scores, k, **opts)
    if why:
        TRACK.skipped.append(why)
        return False
    return True


def merge_served(bk, indices, values, k, **opts) -> bool:
    why = _merge_reason(bk, indices, values, k, **opts)
    if why:
        TRACK.skipped.append(why)
        return False
    return True


# --------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------
def _row_msg(ctx, r, got_i, got_v, exp_i, exp_v):
    lines = [f"{ctx}: row {r} differs"]
    lines.append(f"  got indices {got_i[r].tolist()[:40]}")
    lines.append(f"  exp indices {exp_i[r].tolist()[:40]}")
    if got_v is not None:
        lines.append(f"  got values  {got_v[r].tolist()[:20]}")
        lines.append(f"  exp values  {exp_v[r].tolist()[:20]}")
    return "\n".join(lines)


def assert_result_equal(got_i, got_v, exp_i, exp_v, order: str, ctx: str = "") -> None:
    """got_*: numpy arrays (got_v may be None); exp_*: oracle output."""
    assert got_i.dtype == np.int32, f"{ctx}: indices dtype {got_i.dtype}, want int32"
    assert got_i.shape == exp_i.shape, f"{ctx}: indices shape {got_i.shape}, want {exp_i.shape}"
    if got_v is not None:
        assert got_v.dtype == np.float32, f"{ctx}: values dtype {got_v.dtype}, want float32"
        assert got_v.shape == exp_v.shape, f"{ctx}: values shape {got_v.shape}, want {exp_v.shape}"
    if order in ("rank", "index"):
        bad = np.nonzero((got_i != exp_i).any(axis=1))[0]
        if bad.size:
            r = int(bad[0])
            raise AssertionError(_row_msg(ctx + f" ({bad.size} rows wrong)", r, got_i, got_v, exp_i, exp_v))
        if got_v is not None:
            bad = np.nonzero((u32(got_v) != u32(exp_v)).any(axis=1))[0]
            if bad.size:
                r = int(bad[0])
                raise AssertionError(_row_msg(ctx + " values not bitwise equal", r, got_i, got_v, exp_i, exp_v))
        return
    assert order == "any"
    for r in range(exp_i.shape[0]):
        n = int((exp_i[r] >= 0).sum())
        gi = got_i[r]
        if not ((gi[:n] >= 0).all() and (gi[n:] == -1).all()):
            raise AssertionError(
                _row_msg(ctx + " order=any: valid slots must come first, -1 padding last", r, got_i, got_v, exp_i, exp_v)
            )
        if sorted(gi[:n].tolist()) != sorted(exp_i[r, :n].tolist()):
            raise AssertionError(_row_msg(ctx + " order=any: wrong set", r, got_i, got_v, exp_i, exp_v))
        if got_v is not None:
            want = dict(zip(exp_i[r, :n].tolist(), u32(exp_v[r, :n]).tolist(), strict=True))
            gv = u32(got_v[r])
            for slot in range(n):
                if int(gv[slot]) != want[int(gi[slot])]:
                    raise AssertionError(
                        _row_msg(
                            ctx + f" order=any: value in slot {slot} does not match index {int(gi[slot])}",
                            r,
                            got_i,
                            got_v,
                            exp_i,
                            exp_v,
                        )
                    )
            if not (gv[n:] == u32([-np.inf])[0]).all():
                raise AssertionError(_row_msg(ctx + " order=any: padding values must be -inf", r, got_i, got_v, exp_i, exp_v))


def assert_bitwise_same(a, b, ctx: str) -> None:
    """Two backend results (TopK) must be bit-identical (determinism)."""
    ai, bi = a.indices.cpu().numpy(), b.indices.cpu().numpy()
    assert np.array_equal(ai, bi), f"{ctx}: indices differ between identical calls"
    if a.values is not None or b.values is not None:
        assert a.values is not None and b.values is not None, f"{ctx}: values present in one call only"
        assert np.array_equal(u32(a.values.cpu().numpy()), u32(b.values.cpu().numpy())), (
            f"{ctx}: values differ between identical calls"
        )


def _check_shapes(res, rows, k, device, want_values, ctx):
    assert isinstance(res, tuple) and hasattr(res, "indices") and hasattr(res, "values"), f"{ctx}: not a TopK"
    assert res.indices.dtype == torch.int32, f"{ctx}: indices dtype {res.indices.dtype}"
    assert tuple(res.indices.shape) == (rows, k), f"{ctx}: indices shape {tuple(res.indices.shape)}"
    assert res.indices.device.type == torch.device(device).type, f"{ctx}: indices on {res.indices.device}"
    if want_values:
        assert res.values is not None, f"{ctx}: values missing with return_values=True"
        assert res.values.dtype == torch.float32, f"{ctx}: values dtype {res.values.dtype}"
        assert tuple(res.values.shape) == (rows, k), f"{ctx}: values shape {tuple(res.values.shape)}"
        assert res.values.device.type == torch.device(device).type
    else:
        assert res.values is None, f"{ctx}: values must be None without return_values"


# --------------------------------------------------------------------------
# the main checks
# --------------------------------------------------------------------------
def oracle_topk(scores, k, **opts):
    o = {key: opt_np(v) for key, v in opts.items() if key in TOPK_OPTS}
    return oracle.topk(to_np(scores), k, **o)


def check_topk(bk, scores: torch.Tensor, k: int, *, ctx: str = "", thorough: bool = True, expect=None, **opts):
    """Run ``bk`` on one topk call and compare it to the oracle, exactly.

    With ``thorough``: also the return_values=False path (same indices) and a
    repeated call (bit-identical). The input tensors must not be modified.
    Returns the backend's TopK (with values), or None when the backend does
    not serve the call (recorded as a skipped sub-case, see TRACK).
    """
    if not topk_served(bk, scores, k, **opts):
        return None
    TRACK.checks += 1
    thorough = thorough and not bk.interpreted  # one call per sub-case under the interpreter
    order = opts.get("order", "rank")
    ctx = ctx or _describe(scores, k, opts)
    before = scores.clone()
    exp_i, exp_v = expect if expect is not None else oracle_topk(scores, k, **opts)
    res = sparsetopk.topk(scores, k, return_values=True, backend=bk.name, **opts)
    _check_shapes(res, scores.shape[0], k, scores.device, True, ctx)
    assert_result_equal(res.indices.cpu().numpy(), res.values.cpu().numpy(), exp_i, exp_v, order, ctx)
    if thorough:
        res2 = sparsetopk.topk(scores, k, return_values=False, backend=bk.name, **opts)
        _check_shapes(res2, scores.shape[0], k, scores.device, False, ctx + " [return_values=False]")
        assert_result_equal(res2.indices.cpu().numpy(), None, exp_i, exp_v, order, ctx + " [return_values=False]")
    if thorough or order == "any":  # "any" is only pinned down by determinism
        res3 = sparsetopk.topk(scores, k, return_values=True, backend=bk.name, **opts)
        assert_bitwise_same(res, res3, ctx + " [repeat]")
    assert torch.equal(_bits(before), _bits(scores)), f"{ctx}: the backend modified its input scores"
    return res


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    return t.view(torch.int32) if t.element_size() == 4 else t.view(torch.int16)


def check_merge(bk, indices, values, k, *, ctx: str = "", thorough: bool = True, expect=None, **opts):
    if not merge_served(bk, indices, values, k, **opts):
        return None
    TRACK.checks += 1
    thorough = thorough and not bk.interpreted
    order = opts.get("order", "rank")
    ctx = ctx or f"merge rows={indices.shape[0]} R={indices.shape[1]} k_in={indices.shape[2]} k={k} {opts}"
    bi, bv = indices.clone(), values.clone()
    if expect is None:
        expect = oracle.merge(indices.cpu().numpy(), values.cpu().numpy(), k, **opts)
    exp_i, exp_v = expect
    res = sparsetopk.merge(indices, values, k, backend=bk.name, **opts)
    _check_shapes(res, indices.shape[0], k, indices.device, True, ctx)
    assert_result_equal(res.indices.cpu().numpy(), res.values.cpu().numpy(), exp_i, exp_v, order, ctx)
    if thorough or order == "any":
        res2 = sparsetopk.merge(indices, values, k, backend=bk.name, **opts)
        assert_bitwise_same(res, res2, ctx + " [repeat]")
    assert torch.equal(bi, indices) and torch.equal(_bits(bv), _bits(values)), f"{ctx}: merge modified its inputs"
    return res


def _describe(scores, k, opts):
    shown = {}
    for key, v in opts.items():
        if isinstance(v, torch.Tensor):
            vals = v.tolist()
            shown[key] = f"{str(v.dtype).replace('torch.', '')}{vals[:8]}{'...' if len(vals) > 8 else ''}"
        else:
            shown[key] = v
    return (
        f"topk rows={scores.shape[0]} width={scores.shape[1]} dtype={str(scores.dtype).replace('torch.', '')} "
        f"stride={scores.stride()} k={k} {shown}"
    )


# --------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------
DISTS = ("normal", "grid", "two", "const", "band", "band_neg", "specials", "subnormal", "plateau", "int_small")


def gen_scores(rng: np.random.Generator, rows: int, width: int, dist: str = "normal", k: int = 8) -> np.ndarray:
    """float32 [rows, width] with the requested distribution."""
    shape = (rows, width)
    if dist == "normal":
        a = rng.standard_normal(shape)
    elif dist == "grid":  # ties everywhere, exactly representable in bf16 and fp16
        a = rng.integers(-64, 64, size=shape) / 8.0
    elif dist == "int_small":
        a = rng.integers(0, 4, size=shape).astype(np.float64)
    elif dist == "two":
        a = np.where(rng.random(shape) < 0.5, 1.5, -2.25)
    elif dist == "const":
        a = np.full(shape, 0.75)
    elif dist == "band":  # 1 + n ulp, n in 0..7: thousands within a few ulps
        one = np.float32(1.0)
        ulp = np.spacing(one)
        return (one + rng.integers(0, 8, size=shape).astype(np.float32) * ulp).astype(np.float32)
    elif dist == "band_neg":
        m = np.float32(-3.0)
        ulp = np.spacing(np.float32(3.0))
        return (m - rng.integers(0, 8, size=shape).astype(np.float32) * ulp).astype(np.float32)
    elif dist == "subnormal":
        n = rng.integers(-6, 7, size=shape)
        return (n.astype(np.float32) * np.float32(2.0**-149)).astype(np.float32)
    elif dist == "specials":
        a = rng.standard_normal(shape).astype(np.float32)
        pick = rng.integers(0, 12, size=shape)
        a = np.where(pick == 0, np.float32(np.nan), a)
        a = np.where(pick == 1, np.float32(np.inf), a)
        a = np.where(pick == 2, np.float32(-np.inf), a)
        a = np.where(pick == 3, np.float32(0.0), a)
        a = np.where(pick == 4, np.float32(-0.0), a)
        return a.astype(np.float32)
    elif dist == "plateau":  # equal maxima straddling slot k
        a = rng.standard_normal(shape) - 10.0
        for r in range(rows):
            top = max(k - 3, 0)
            cols = rng.permutation(width)
            a[r, cols[:top]] = 100.0 + rng.standard_normal(min(top, width))
            a[r, cols[top : top + 8]] = 50.0
        return a.astype(np.float32)
    else:
        raise ValueError(dist)
    return np.asarray(a, dtype=np.float32)


def dirty(arr: np.ndarray, *, lengths=None, starts=None, index_scale: int = 1, index_offset: int = 0) -> np.ndarray:
    """Fill every buffer column outside each row's valid range with NaN / +inf
    / 1e30 / ... (SPEC: never selected, whatever it holds)."""
    arr = arr.copy()
    rows, width = arr.shape
    lengths = opt_np(lengths)
    starts = opt_np(starts)
    dirt = np.array(DIRT, dtype=np.float32)
    col = np.arange(width, dtype=np.int64)
    for r in range(rows):
        length = lengths if (lengths is None or isinstance(lengths, (int, np.integer))) else lengths[r]
        s, w_r, length_r = oracle.row_geometry(width, None if starts is None else starts[r], length, index_scale)
        j = col - s
        bad = (j < 0) | (j * index_scale + index_offset >= length_r)
        arr[r, bad] = dirt[(col[bad] + r) % len(dirt)]
    return arr


def ids(vals):
    return [str(v).replace("torch.", "") for v in vals]
