"""Triton kernels of the triton-portable backend.

Every kernel works on the canonical total order of SPEC §1, realised as one
signed 64-bit key per valid column::

    key = sord(canonical score) << 32 | (tie low ? 0xFFFFFFFF - g : g)

where ``sord`` is the *signed* ordered form of the float32 bits
(``b < 0 ? b ^ 0x7FFFFFFF : b``). ``sord ^ 0x80000000`` is exactly the
``ordered_u32`` of the spec, so ordering signed keys descending is the spec's
order. The signed form avoids uint32/uint64 arithmetic, which the Triton
interpreter (TRITON_INTERPRET=1) mishandles. ``INT64_MIN`` is never a valid
key (the smallest valid ``sord`` is that of -inf, 0x807FFFFF) and marks
"nothing" in every block.

Two selection schemes:

* stream (small k): one row tile at a time, ``tl.topk`` keeps the best
  ``KP = next_pow2(k)`` keys, merged with the running best. One pass over the
  row; very long rows are split across programs and the partial lists merged
  by a second kernel.
* radix (large k): radix select over the 32-bit ordered score (4 passes of
  8-bit histograms, accumulated with integer atomics across the programs of a
  row, so deterministic), giving the threshold T and how many ties at T to
  take; then exact tie resolution by global index (prefix counts in index
  order) and a compaction that writes the selected columns in index order.
  ``order="rank"`` then sorts the k selected keys (``tl.sort`` on int64).

Merge dedupes by sorting packed (g, -value) keys, then selects with
``tl.topk``.

No kernel reads device memory on the host; every launch is on the current
stream and has static shapes, so everything is CUDA-graph capturable.
"""

from __future__ import annotations

import triton
import triton.language as tl

INT64_MIN = tl.constexpr(-(2**63))
INT64_MAX = tl.constexpr(2**63 - 1)
INT32_MIN = tl.constexpr(-(2**31))
INT32_MAX = tl.constexpr(2**31 - 1)
LOW32 = tl.constexpr(4294967295)

ORDER_RANK = tl.constexpr(0)
ORDER_INDEX = tl.constexpr(1)
ORDER_ANY = tl.constexpr(2)


# ---------------------------------------------------------------------------
# shared device helpers
# ---------------------------------------------------------------------------


@triton.jit
def _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off,
          HAS_STARTS, LEN_MODE):
    """Row geometry: (start column s, clamped global length L, valid count nj)."""
    w64 = width.to(tl.int64)
    if HAS_STARTS:
        s = tl.load(starts_ptr + row).to(tl.int64)
        s = tl.minimum(tl.maximum(s, 0), w64)
    else:
        s = w64 * 0
    W = w64 - s
    cap = W * scale
    if LEN_MODE == 0:
        L = cap
    elif LEN_MODE == 1:
        L = tl.minimum(tl.maximum(len_int.to(tl.int64), 0), cap)
    else:
        L = tl.minimum(tl.maximum(tl.load(lens_ptr + row).to(tl.int64), 0), cap)
    t = tl.maximum(L - off, 0)
    nj = tl.minimum(W, (t + scale - 1) // scale)
    return s, L, nj.to(tl.int32)


@triton.jit
def _tile_sord(row_ptr, j, nj, scale, off, fb, fe_thr):
    """Signed ordered canonical score, global index and validity of columns j."""
    valid = j < nj
    x = tl.load(row_ptr + j, mask=valid, other=0.0).to(tl.float32)
    g = j * scale + off
    forced = (g < fb) | (g.to(tl.int64) >= fe_thr)
    x = tl.where(x == 0.0, 0.0, x)
    x = tl.where(x != x, float("-inf"), x)
    x = tl.where(forced, float("inf"), x)
    b = x.to(tl.int32, bitcast=True)
    sord = tl.where(b < 0, b ^ 0x7FFFFFFF, b)
    return sord, g, valid


@triton.jit
def _make_key(sord, g, valid, TIE_LOW):
    g64 = g.to(tl.int64)
    if TIE_LOW:
        lo = g64 ^ LOW32
    else:
        lo = g64
    key = (sord.to(tl.int64) << 32) | lo
    return tl.where(valid, key, INT64_MIN)


@triton.jit
def _sord_to_f32(sord):
    b = tl.where(sord < 0, sord ^ 0x7FFFFFFF, sord)
    return b.to(tl.float32, bitcast=True)


@triton.jit
def _f32_to_sord(v):
    v = tl.where(v == 0.0, 0.0, v)
    v = tl.where(v != v, float("-inf"), v)
    b = v.to(tl.int32, bitcast=True)
    return tl.where(b < 0, b ^ 0x7FFFFFFF, b)


@triton.jit
def _emit(best, row, k, idx_ptr, s_oi, val_ptr, s_ov,
          TIE_LOW, ORDER, WRITE_VALS, KP: tl.constexpr):
    """Write a descending-sorted key block (INT64_MIN = empty) as the answer."""
    i = tl.arange(0, KP)
    valid = (best != INT64_MIN) & (i < k)
    lo = best & LOW32
    if TIE_LOW:
        g = (lo ^ LOW32).to(tl.int32)
    else:
        g = lo.to(tl.int32)
    sord = (best >> 32).to(tl.int32)
    if ORDER == ORDER_INDEX:
        # re-sort the selected by ascending global index, carrying the score
        ik = tl.where(valid, (g.to(tl.int64) << 32) | (sord.to(tl.int64) & LOW32), INT64_MAX)
        ik = tl.sort(ik)
        valid = ik != INT64_MAX
        g = (ik >> 32).to(tl.int32)
        sord = (ik & LOW32).to(tl.int32)
    m = i < k
    tl.store(idx_ptr + row.to(tl.int64) * s_oi + i, tl.where(valid, g, -1), mask=m)
    if WRITE_VALS:
        v = tl.where(valid, _sord_to_f32(sord), float("-inf"))
        tl.store(val_ptr + row.to(tl.int64) * s_ov + i, v, mask=m)


# ---------------------------------------------------------------------------
# stream scheme (small k)
# ---------------------------------------------------------------------------


@triton.jit
def _merge_best(best, cand, KP: tl.constexpr):
    both = tl.reshape(tl.join(best, cand), [2 * KP])
    return tl.topk(both, KP)


@triton.jit(do_not_specialize=["width", "len_int", "k", "fb", "fe", "HAS_STARTS", "LEN_MODE", "TIE_LOW", "ORDER", "WRITE_VALS"])
def _stream_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                   idx_ptr, s_oi, val_ptr, s_ov, part_ptr, k,
                   HAS_STARTS, LEN_MODE, TIE_LOW,
                   ORDER, WRITE_VALS, SPLIT: tl.constexpr,
                   KP: tl.constexpr, BLOCK: tl.constexpr):
    # program (row, sp) of nsp owns the row tiles sp, sp + nsp, sp + 2 nsp, ...
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, L, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = L - fe
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    cols = tl.arange(0, BLOCK)
    j0 = sp * BLOCK
    sord, g, valid = _tile_sord(row_ptr, j0 + cols, nj, scale, off, fb, fe_thr)
    key = _make_key(sord, g, valid, TIE_LOW)
    if BLOCK == KP:
        best = tl.sort(key, descending=True)
    else:
        best = tl.topk(key, KP)
    for t in range(j0 + nsp * BLOCK, nj, nsp * BLOCK):
        sord, g, valid = _tile_sord(row_ptr, t + cols, nj, scale, off, fb, fe_thr)
        key = _make_key(sord, g, valid, TIE_LOW)
        if BLOCK == KP:
            cand = key
        else:
            cand = tl.topk(key, KP)
        best = _merge_best(best, cand, KP)
    if SPLIT:
        base = (row.to(tl.int64) * nsp + sp) * KP
        tl.store(part_ptr + base + tl.arange(0, KP), best)
    else:
        _emit(best, row, k, idx_ptr, s_oi, val_ptr, s_ov, TIE_LOW, ORDER, WRITE_VALS, KP)


@triton.jit(do_not_specialize=["k", "nsplit", "TIE_LOW", "ORDER", "WRITE_VALS"])
def _stream_final_kernel(part_ptr, nsplit, idx_ptr, s_oi, val_ptr, s_ov, k,
                         TIE_LOW, ORDER, WRITE_VALS,
                         KP: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, KP)
    base = row.to(tl.int64) * nsplit * KP
    best = tl.load(part_ptr + base + i)
    for t in range(1, nsplit):
        cand = tl.load(part_ptr + base + t * KP + i)
        best = _merge_best(best, cand, KP)
    _emit(best, row, k, idx_ptr, s_oi, val_ptr, s_ov, TIE_LOW, ORDER, WRITE_VALS, KP)


# ---------------------------------------------------------------------------
# radix scheme (large k)
# ---------------------------------------------------------------------------


@triton.jit
def _radix_state(hist_ptr, row, kk, P):
    """Replay the digit choices of passes 0..P-1 from the row's histograms.

    Returns (prefix as the ordered-u32 bit pattern in an int32, remaining rank
    inside the prefix bucket, size of the prefix bucket)."""
    b = tl.arange(0, 256)
    prefix = kk * 0
    rem = kk
    cnt = kk * 0
    for q in range(P):
        h = tl.load(hist_ptr + row.to(tl.int64) * 1024 + q * 256 + b)
        tot = tl.sum(h, 0)
        ge = tot - tl.cumsum(h, 0) + h  # count with digit >= d
        d = tl.max(tl.where(ge >= rem, b, -1), 0)
        sel = b == d
        above = tl.sum(tl.where(sel, ge - h, 0), 0)
        cnt = tl.sum(tl.where(sel, h, 0), 0)
        rem = rem - above
        prefix = prefix | (d << (24 - 8 * q))
    return prefix, rem, cnt


@triton.jit(do_not_specialize=["width", "len_int", "k", "fb", "fe", "HAS_STARTS", "LEN_MODE", "P"])
def _radix_hist_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                       hist_ptr, k,
                       HAS_STARTS, LEN_MODE, P,
                       BLOCK: tl.constexpr):
    # program (row, sp) of nsp owns the row tiles sp, sp + nsp, ... (so the work
    # spreads over all programs whatever the row's device-side length is)
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, L, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = L - fe
    kk = tl.minimum(nj, k)
    prefix, rem, cnt = _radix_state(hist_ptr, row, kk, P)
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    cols = tl.arange(0, BLOCK)
    local = tl.zeros([256], dtype=tl.int32)
    for t in range(sp * BLOCK, nj, nsp * BLOCK):
        sord, g, valid = _tile_sord(row_ptr, t + cols, nj, scale, off, fb, fe_thr)
        u = sord ^ INT32_MIN
        if P > 0:
            sh = 32 - 8 * P
            valid = valid & ((u >> sh) == (prefix >> sh))
        d = (u >> (24 - 8 * P)) & 255
        local += tl.histogram(d, 256, mask=valid)
    tl.atomic_add(hist_ptr + row.to(tl.int64) * 1024 + P * 256 + tl.arange(0, 256), local)


@triton.jit(do_not_specialize=["width", "len_int", "k", "fb", "fe", "ntiles", "HAS_STARTS", "LEN_MODE"])
def _radix_count_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                        hist_ptr, cnt_ptr, k, ntiles,
                        HAS_STARTS, LEN_MODE, BLOCK: tl.constexpr):
    """Per tile: how many columns are above T and equal to T (for the prefix counts)."""
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, L, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = L - fe
    kk = tl.minimum(nj, k)
    prefix, rem, cnt = _radix_state(hist_ptr, row, kk, 4)
    T = prefix ^ INT32_MIN
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    cols = tl.arange(0, BLOCK)
    cbase = row.to(tl.int64) * ntiles * 2
    for t in range(sp * BLOCK, nj, nsp * BLOCK):
        sord, g, valid = _tile_sord(row_ptr, t + cols, nj, scale, off, fb, fe_thr)
        n_gt = tl.sum((valid & (sord > T)).to(tl.int32), 0)
        n_eq = tl.sum((valid & (sord == T)).to(tl.int32), 0)
        tile = t // BLOCK
        tl.store(cnt_ptr + cbase + tile * 2, n_gt)
        tl.store(cnt_ptr + cbase + tile * 2 + 1, n_eq)


@triton.jit(do_not_specialize=["width", "len_int", "k", "fb", "fe", "ntiles", "HAS_STARTS", "LEN_MODE", "TIE_LOW", "WRITE_VALS"])
def _radix_write_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                        hist_ptr, cnt_ptr, idx_ptr, s_oi, val_ptr, s_ov, k, ntiles,
                        HAS_STARTS, LEN_MODE, TIE_LOW,
                        WRITE_VALS, BLOCK: tl.constexpr, SBLOCK: tl.constexpr,
                        PBLOCK: tl.constexpr):
    """Compaction in index order: every column above T, and the ties at T that the
    tie rule takes (by their rank in index order among all ties of the row)."""
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, L, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = L - fe
    kk = tl.minimum(nj, k)
    prefix, rem, cnt_eq = _radix_state(hist_ptr, row, kk, 4)
    T = prefix ^ INT32_MIN
    if TIE_LOW:
        lo = kk * 0
    else:
        lo = cnt_eq - rem
    gt_base = kk * 0
    eq_base = kk * 0
    done = kk * 0  # tiles [0, done) already summed into the bases
    sidx = tl.arange(0, SBLOCK)
    cbase = row.to(tl.int64) * ntiles * 2
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    orow = idx_ptr + row.to(tl.int64) * s_oi
    vrow = val_ptr + row.to(tl.int64) * s_ov
    cols = tl.arange(0, BLOCK)
    for t in range(sp * BLOCK, nj, nsp * BLOCK):
        tile = t // BLOCK
        # add the counts of tiles [done, tile) (at most nsp of them, SBLOCK >= nsp)
        m = (done + sidx) < tile
        gt_base += tl.sum(tl.load(cnt_ptr + cbase + (done + sidx) * 2, mask=m, other=0), 0)
        eq_base += tl.sum(tl.load(cnt_ptr + cbase + (done + sidx) * 2 + 1, mask=m, other=0), 0)
        sord, g, valid = _tile_sord(row_ptr, t + cols, nj, scale, off, fb, fe_thr)
        gt = (valid & (sord > T)).to(tl.int32)
        eq = (valid & (sord == T)).to(tl.int32)
        gt_ex = tl.cumsum(gt, 0) - gt + gt_base
        e = tl.cumsum(eq, 0) - eq + eq_base
        take = (eq != 0) & (e >= lo) & (e < lo + rem)
        sel = (gt != 0) | take
        pos = gt_ex + tl.minimum(tl.maximum(e - lo, 0), rem)
        tl.store(orow + pos, g, mask=sel)
        if WRITE_VALS:
            tl.store(vrow + pos, _sord_to_f32(sord), mask=sel)
        gt_base += tl.sum(gt, 0)
        eq_base += tl.sum(eq, 0)
        done = tile + 1
    if sp == 0:
        pcols = tl.arange(0, PBLOCK)
        for t in range(kk, k, PBLOCK):
            m = (t + pcols) < k
            tl.store(orow + t + pcols, tl.full([PBLOCK], -1, tl.int32), mask=m)
            if WRITE_VALS:
                tl.store(vrow + t + pcols, tl.full([PBLOCK], float("-inf"), tl.float32), mask=m)


@triton.jit(do_not_specialize=["k", "TIE_LOW"])
def _rank_sort_kernel(idx_ptr, s_oi, val_ptr, s_ov, k,
                      TIE_LOW, KP: tl.constexpr):
    """Sort a row's selected (index, canonical value) pairs into rank order in place."""
    row = tl.program_id(0)
    i = tl.arange(0, KP)
    m = i < k
    orow = idx_ptr + row.to(tl.int64) * s_oi
    vrow = val_ptr + row.to(tl.int64) * s_ov
    g = tl.load(orow + i, mask=m, other=-1)
    v = tl.load(vrow + i, mask=m, other=0.0)
    valid = g >= 0
    key = _make_key(_f32_to_sord(v), g, valid, TIE_LOW)
    best = tl.sort(key, descending=True)
    tl.debug_barrier()
    _emit(best, row, k, idx_ptr, s_oi, val_ptr, s_ov, TIE_LOW, ORDER_RANK, True, KP)


# ---------------------------------------------------------------------------
# merge
# ---------------------------------------------------------------------------


@triton.jit(do_not_specialize=["k", "n", "TIE_LOW", "ORDER", "WRITE_VALS"])
def _merge_kernel(in_idx_ptr, in_val_ptr, n, scratch_ptr, idx_ptr, s_oi, val_ptr, s_ov, k,
                  TIE_LOW, ORDER, WRITE_VALS,
                  NP: tl.constexpr, KP: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, NP)
    m = i < n
    base = row.to(tl.int64) * n
    g = tl.load(in_idx_ptr + base + i, mask=m, other=-1)
    v = tl.load(in_val_ptr + base + i, mask=m, other=float("-inf"))
    valid = m & (g >= 0)
    sord = _f32_to_sord(v)
    # ascending (g, descending score): the first of each run of equal g is the copy to keep
    pk = tl.where(valid, (g.to(tl.int64) << 32) | ((sord.to(tl.int64) + 2147483648) ^ LOW32), INT64_MAX)
    pk = tl.sort(pk)
    srow = scratch_ptr + row.to(tl.int64) * NP
    tl.store(srow + i, pk)
    tl.debug_barrier()
    prev = tl.load(srow + i - 1, mask=i > 0, other=INT64_MAX)
    gs = (pk >> 32).to(tl.int32)
    keep = (pk != INT64_MAX) & ((i == 0) | ((prev >> 32).to(tl.int32) != gs))
    sord = (((pk & LOW32) ^ LOW32) - 2147483648).to(tl.int32)
    key = _make_key(sord, gs, keep, TIE_LOW)
    if NP == KP:
        best = tl.sort(key, descending=True)
    else:
        best = tl.topk(key, KP)
    _emit(best, row, k, idx_ptr, s_oi, val_ptr, s_ov, TIE_LOW, ORDER, WRITE_VALS, KP)
