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


def _jit(fn):
    """``triton.jit`` with every non-constexpr argument excluded from specialisation.

    Triton otherwise compiles a separate variant for each combination of integer
    arguments equal to 1 / divisible by 16 and pointers aligned to 16 bytes (the
    conformance suite hit 556 variants that way). The kernels gain nothing from it:
    row starts are runtime values, so load alignment is unknown anyway."""
    import inspect

    params = inspect.signature(fn).parameters.values()
    names = [p.name for p in params if p.annotation is inspect.Parameter.empty]
    return triton.jit(do_not_specialize=names)(fn)


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
def _load_i64(p32, row):
    """Element ``row`` of an int64 tensor passed as its int32 view (little endian), so
    int32 and int64 starts/lengths share one pointer type (one compiled variant)."""
    r2 = row.to(tl.int64) * 2
    lo = tl.load(p32 + r2).to(tl.int64) & LOW32
    hi = tl.load(p32 + r2 + 1).to(tl.int64)
    return (hi << 32) | lo


@triton.jit
def _row_active(row, nj, flag_ptr, USE_FLAG):
    """Nonzero if the program's row is to be worked on: always, or with USE_FLAG
    (the exact fallback launch of a one-read scheme) only when the row's flag is set."""
    active = nj * 0 + 1
    if USE_FLAG:
        active = tl.load(flag_ptr + row)
    return active


@triton.jit
def _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off,
          HAS_STARTS, LEN_MODE):
    """Row geometry: (start column s, clamped global length L, valid count nj).

    HAS_STARTS: 0 none, 1 int32, 2 int64 (as int32 pairs); LEN_MODE: 0 none,
    1 Python int, 2 int32 tensor, 3 int64 tensor (as int32 pairs)."""
    w64 = width.to(tl.int64)
    if HAS_STARTS == 1:
        s = tl.load(starts_ptr + row).to(tl.int64)
        s = tl.minimum(tl.maximum(s, 0), w64)
    elif HAS_STARTS == 2:
        s = _load_i64(starts_ptr, row)
        s = tl.minimum(tl.maximum(s, 0), w64)
    else:
        s = row.to(tl.int64) * 0  # the shape of row (a block of rows in the sample gate)
    W = w64 - s
    cap = W * scale
    if LEN_MODE == 0:
        L = cap
    elif LEN_MODE == 1:
        L = tl.minimum(tl.maximum(len_int.to(tl.int64), 0), cap)
    elif LEN_MODE == 2:
        L = tl.minimum(tl.maximum(tl.load(lens_ptr + row).to(tl.int64), 0), cap)
    else:
        L = tl.minimum(tl.maximum(_load_i64(lens_ptr, row), 0), cap)
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


@_jit
def _stream_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                   idx_ptr, s_oi, val_ptr, s_ov, part_ptr, scr_ptr, flag_ptr, k,
                   HAS_STARTS, LEN_MODE, TIE_LOW,
                   ORDER, WRITE_VALS, SPLIT, USE_FLAG,
                   KP: tl.constexpr, BLOCK: tl.constexpr, NG: tl.constexpr,
                   C: tl.constexpr, SUB: tl.constexpr):
    """Running best KP keys over the row's tiles, with an exact pre-filter per tile.

    Per tile: T = the KP-th largest of the maxima of NG column groups. The KP best
    keys of the tile are all >= T (the KP groups with the largest maxima hold KP
    keys >= T), and only keys above the current KP-th best can enter. The few
    candidates passing both are compacted (prefix sum) into a C-slot scratch
    and merged. A tile with more than C candidates (heavy ties, adversarial data)
    is merged exactly in SUB-column pieces instead. Code size depends on KP, C and
    SUB, not on BLOCK."""
    # program (row, sp) of nsp owns the row tiles sp, sp + nsp, sp + 2 nsp, ...
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, L, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    active = _row_active(row, nj, flag_ptr, USE_FLAG)  # exact fallback of the lane scheme: only rows it flagged
    nj_run = tl.where(active != 0, nj, 0)
    fe_thr = L - fe
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    cols = tl.arange(0, BLOCK)
    ci = tl.arange(0, C)
    si = tl.arange(0, SUB)
    scr = scr_ptr + (row.to(tl.int64) * nsp + sp) * C
    best = tl.full([KP], INT64_MIN, tl.int64)
    for t in range(sp * BLOCK, nj_run, nsp * BLOCK):
        sord, g, valid = _tile_sord(row_ptr, t + cols, nj, scale, off, fb, fe_thr)
        key = _make_key(sord, g, valid, TIE_LOW)
        kth = tl.min(best, 0)
        gmax = tl.max(tl.reshape(key, [NG, BLOCK // NG]), 1)
        thr = tl.min(tl.topk(gmax, KP), 0)
        cand = (key >= thr) & (key > kth)
        n = tl.sum(cand.to(tl.int32), 0)
        if n <= C:
            if n > 0:
                pos = tl.cumsum(cand.to(tl.int32), 0) - 1
                tl.store(scr + pos, key, mask=cand)
                tl.debug_barrier()
                c = tl.load(scr + ci, mask=ci < n, other=INT64_MIN)
                tl.debug_barrier()
                if C > KP:
                    c = tl.topk(c, KP)
                best = _merge_best(best, c, KP)
        else:
            for u in range(t, t + BLOCK, SUB):
                sord2, g2, valid2 = _tile_sord(row_ptr, u + si, nj, scale, off, fb, fe_thr)
                key2 = _make_key(sord2, g2, valid2, TIE_LOW)
                if SUB > KP:
                    key2 = tl.topk(key2, KP)
                best = _merge_best(best, key2, KP)
    if SPLIT:
        base = (row.to(tl.int64) * nsp + sp) * KP
        tl.store(part_ptr + base + tl.arange(0, KP), best)
    else:
        if active != 0:
            _emit(best, row, k, idx_ptr, s_oi, val_ptr, s_ov, TIE_LOW, ORDER, WRITE_VALS, KP)


@_jit
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
# lane scheme (k <= 64): one read, 32-bit work per element, exact fallback flag
# ---------------------------------------------------------------------------


@_jit
def _lane_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                 idx_ptr, s_oi, val_ptr, s_ov, part_ptr, buf_ptr, flag_ptr, k,
                 HAS_STARTS, LEN_MODE, TIE_LOW, ORDER, WRITE_VALS, SPLIT,
                 KP: tl.constexpr, L: tl.constexpr, R: tl.constexpr, CAP: tl.constexpr):
    """Small-k selection reading each column once with 32-bit work per element.

    A tile of R*L columns is viewed as [R, L]; acc[L] keeps a running maximum
    per lane (column j belongs to lane j % L). The KP-th largest lane maximum T
    is a lower bound of the row's KP-th (hence k-th) best score: KP distinct
    columns are >= T. Only columns with score >= T (after the first tiles: few)
    get a 64-bit key and are appended (prefix sums) to a CAP-slot per-program
    buffer in global scratch. When the buffer would overflow it is cut to its
    KP best keys (exact: everything else there is beaten by KP keys), whose
    KP-th score raises T. If a tile's candidates still do not fit (heavy ties,
    adversarial layouts) the program sets flag[row] and the host-side launch
    runs the exact stream kernel for flagged rows only (device-side flag, no
    sync). At the end the buffer's KP best are the answer (or, split, this
    program's partial list for _stream_final_kernel).

    Append order does not matter (positions come from prefix sums in column
    order anyway, and the final tl.topk orders by key), so it is deterministic."""
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, Lr, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = Lr - fe
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    BLOCK: tl.constexpr = R * L
    cols2 = tl.arange(0, R)[:, None] * L + tl.arange(0, L)[None, :]
    ci = tl.arange(0, CAP)
    buf = buf_ptr + (row.to(tl.int64) * nsp + sp) * CAP
    acc = tl.full([L], INT32_MIN, tl.int32)
    T = nj * 0 + INT32_MIN
    cnt = nj * 0
    ovf = nj * 0
    for t in range(sp * BLOCK, nj, nsp * BLOCK):
        sord, g, valid = _tile_sord(row_ptr, t + cols2, nj, scale, off, fb, fe_thr)
        sord = tl.where(valid, sord, INT32_MIN)
        acc = tl.maximum(acc, tl.max(sord, 0))
        T = tl.maximum(T, tl.min(tl.topk(acc, KP), 0))
        cand = valid & (sord >= T)
        n = tl.sum(tl.sum(cand.to(tl.int32), 1), 0)
        if n > 0:
            if cnt + n > CAP:
                # cut the buffer to its KP best keys; their KP-th score bounds T
                b = tl.load(buf + ci, mask=ci < cnt, other=INT64_MIN)
                b = tl.topk(b, KP)
                tl.debug_barrier()
                tl.store(buf + tl.arange(0, KP), b)
                tl.debug_barrier()
                cnt = nj * 0 + KP
                T = tl.maximum(T, (tl.min(b, 0) >> 32).to(tl.int32))
                cand = cand & (sord >= T)
                n = tl.sum(tl.sum(cand.to(tl.int32), 1), 0)
            if cnt + n > CAP:
                ovf = nj * 0 + 1
            else:
                c32 = cand.to(tl.int32)
                rs = tl.sum(c32, 1)
                pos = cnt + (tl.cumsum(rs, 0) - rs)[:, None] + tl.cumsum(c32, 1) - c32
                key = _make_key(sord, g, cand, TIE_LOW)
                tl.store(buf + pos, key, mask=cand)
                cnt += n
    tl.debug_barrier()
    b = tl.load(buf + ci, mask=ci < cnt, other=INT64_MIN)
    best = tl.topk(b, KP)
    if ovf != 0:
        tl.store(flag_ptr + row, 1)
    if SPLIT:
        base = (row.to(tl.int64) * nsp + sp) * KP
        tl.store(part_ptr + base + tl.arange(0, KP), best)
    else:
        if ovf == 0:
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


@triton.jit
def _fallback_share(row, sp, nsp, cnt_ptr, kk_ptr, capc, nsp_gated):
    """The sample scheme's radix fallback launch, program (row, sp) of nsp: how many
    programs share the row, or 0 when this one has nothing to do. A row the sample
    served (kk..capc candidates gathered) takes none. The sample's gate flags every
    row of its call (kk > capc): those split over nsp_gated, sized for all rows. A
    row its estimate missed (rare) splits over all nsp, sized for a few rows."""
    c = tl.load(cnt_ptr + row)
    kk = tl.load(kk_ptr + row)
    n = tl.where(kk > capc, nsp_gated, nsp)
    return tl.where(((c < kk) | (c > capc)) & (sp < n), n, 0)


@_jit
def _radix_hist_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                       hist_ptr, k,
                       flag_ptr, kk_ptr, capc, nsp_gated, USE_FLAG, HAS_STARTS, LEN_MODE, P,
                       BLOCK: tl.constexpr):
    # program (row, sp) of nsp owns the row tiles sp, sp + nsp, ... (so the work
    # spreads over all programs whatever the row's device-side length is)
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    if USE_FLAG:  # the sample's fallback launch: an unflagged row's programs leave at once
        share = _fallback_share(row, sp, nsp, flag_ptr, kk_ptr, capc, nsp_gated)
        if share == 0:
            return
        nsp = share
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
    # only the bins this program saw: past the first digit most are empty, and a row
    # the fallback launch skips has none
    tl.atomic_add(hist_ptr + row.to(tl.int64) * 1024 + P * 256 + tl.arange(0, 256), local, mask=local != 0)


@_jit
def _radix_count_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                        hist_ptr, cnt_ptr, k, ntiles,
                        flag_ptr, kk_ptr, capc, nsp_gated, USE_FLAG, HAS_STARTS, LEN_MODE, BLOCK: tl.constexpr):
    """Per tile: how many columns are above T and equal to T (for the prefix counts)."""
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    if USE_FLAG:  # the sample's fallback launch: an unflagged row's programs leave at once
        share = _fallback_share(row, sp, nsp, flag_ptr, kk_ptr, capc, nsp_gated)
        if share == 0:
            return
        nsp = share
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


@_jit
def _radix_write_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                        hist_ptr, cnt_ptr, idx_ptr, s_oi, val_ptr, s_ov, k, ntiles,
                        flag_ptr, kk_ptr, capc, nsp_gated, USE_FLAG, HAS_STARTS, LEN_MODE, TIE_LOW,
                        WRITE_VALS, BLOCK: tl.constexpr, SBLOCK: tl.constexpr,
                        PBLOCK: tl.constexpr):
    """Compaction in index order: every column above T, and the ties at T that the
    tie rule takes (by their rank in index order among all ties of the row)."""
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    if USE_FLAG:  # the sample's fallback launch: an unflagged row's programs leave at once
        share = _fallback_share(row, sp, nsp, flag_ptr, kk_ptr, capc, nsp_gated)
        if share == 0:
            return
        nsp = share
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


# ---------------------------------------------------------------------------
# sample scheme (large k, long rows): one gather read + exact select of candidates
# ---------------------------------------------------------------------------


@_jit
def _sample_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                   est_ptr, kk_ptr, k, capc, min_above, nrows, gate_cols,
                   HAS_STARTS, LEN_MODE, SS: tl.constexpr, RB: tl.constexpr):
    """Threshold estimate per row from a strided sample of SS columns: the score
    of the sample's m-th best, m chosen so that ~2.25 k + 64 columns of the row are
    expected at or above it, and m >= min_above (with fewer samples above it the
    gathered count is too uncertain: overflow or shortfall). Rows with at most capc
    valid columns take all (estimate INT32_MIN). Also stores kk = min(k, valid columns).

    gate_cols > 0 (lengths or starts on the device): a call with fewer valid columns
    in all than gate_cols, where the sample's fixed cost does not pay, flags every row
    for the radix fallback instead (estimate INT32_MAX: the gather skips the row;
    kk = capc + 1: the host-side flag test takes it), before the sample's sort."""
    row = tl.program_id(0)
    if gate_cols > 0:
        tot = tl.zeros((RB,), dtype=tl.int64)
        for r0 in range(0, nrows, RB):
            rr = r0 + tl.arange(0, RB)
            _s, _L, njv = _geom(tl.minimum(rr, nrows - 1), starts_ptr, lens_ptr, len_int, width, scale,
                                off, HAS_STARTS, LEN_MODE)
            tot += tl.where(rr < nrows, njv, 0).to(tl.int64)
        if tl.sum(tot, 0) < gate_cols:
            tl.store(est_ptr + row, INT32_MAX)
            tl.store(kk_ptr + row, capc + 1)
            return
    s, Lr, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = Lr - fe
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    kk = tl.minimum(nj, k)
    i = tl.arange(0, SS)
    ns = tl.maximum(tl.minimum(nj, SS), 1)
    nj64 = tl.maximum(nj, 1).to(tl.int64)
    j = ((i.to(tl.int64) * nj64) // ns).to(tl.int32)
    sord, g, valid = _tile_sord(row_ptr, j, nj, scale, off, fb, fe_thr)
    valid = valid & (i < ns)
    srt = tl.sort(tl.where(valid, sord, INT32_MIN), descending=True)
    target = (kk.to(tl.int64) * 9) // 4 + 64
    target = tl.maximum(target, (min_above * nj64) // ns)
    m = tl.minimum((target * ns) // nj64, ns - 1).to(tl.int32)
    est = tl.sum(tl.where(i == m, srt, 0), 0)
    est = tl.where(nj <= capc, INT32_MIN, est)
    tl.store(est_ptr + row, est)
    tl.store(kk_ptr + row, kk)


@_jit
def _gather_kernel(scores_ptr, s_sr, starts_ptr, lens_ptr, len_int, width, scale, off, fb, fe,
                   est_ptr, cnt_ptr, cidx_ptr, cval_ptr, capc,
                   HAS_STARTS, LEN_MODE, BLOCK: tl.constexpr):
    """One read of the row (tiles round-robin over the row's programs): columns with
    score >= the estimate are appended (atomic per-row counter + prefix sums) as
    (global index, canonical value) to the row's capc-slot candidate buffer. The
    counter keeps counting past capc (overflow detection). Append order varies
    between runs; the exact select that follows sorts by key, so the output does
    not depend on it."""
    row = tl.program_id(0)
    sp = tl.program_id(1)
    nsp = tl.num_programs(1)
    s, Lr, nj = _geom(row, starts_ptr, lens_ptr, len_int, width, scale, off, HAS_STARTS, LEN_MODE)
    fe_thr = Lr - fe
    row_ptr = scores_ptr + row.to(tl.int64) * s_sr + s
    T = tl.load(est_ptr + row)
    if T == INT32_MAX:  # the sample's gate sent every row to the radix fallback
        return
    cols = tl.arange(0, BLOCK)
    cbase = row.to(tl.int64) * capc
    for t in range(sp * BLOCK, nj, nsp * BLOCK):
        sord, g, valid = _tile_sord(row_ptr, t + cols, nj, scale, off, fb, fe_thr)
        c32 = (valid & (sord >= T)).to(tl.int32)
        n = tl.sum(c32, 0)
        if n > 0:
            base = tl.atomic_add(cnt_ptr + row, n)
            pos = base + tl.cumsum(c32, 0) - 1
            m = (c32 != 0) & (pos < capc)
            tl.store(cidx_ptr + cbase + pos, g, mask=m)
            tl.store(cval_ptr + cbase + pos, _sord_to_f32(sord), mask=m)


# ---------------------------------------------------------------------------
# chunked sorting (large k rank order, large merges): code size set by CH only
# ---------------------------------------------------------------------------


@triton.jit
def _count_gt(chunk_ptr, x, CH: tl.constexpr, LOG_CH: tl.constexpr):
    """For each x: how many keys of a descending-sorted CH-key chunk are > x
    (branchless binary search, LOG_CH + 1 gathers)."""
    pos = tl.zeros(x.shape, tl.int32)
    for q in tl.static_range(LOG_CH):
        v = tl.load(chunk_ptr + pos + ((CH >> (q + 1)) - 1))
        pos = tl.where(v > x, pos + (CH >> (q + 1)), pos)
    v = tl.load(chunk_ptr + pos)
    return tl.where(v > x, pos + 1, pos)


@_jit
def _sort_chunks_kernel(src_idx, s_si, src_val, s_sv, n, dst_ptr, nch, count_ptr, USE_COUNT,
                        TIE_LOW, MODE, CH: tl.constexpr):
    """Chunk c of a row's n (index, float32 value) pairs -> CH int64 keys sorted
    descending into dst[row, c*CH:(c+1)*CH]; entries with index < 0 (or past n)
    become INT64_MIN. MODE 0: rank keys. MODE 1: index-order keys
    ((INT32_MAX - g) << 32 | sord). MODE 2: NOT of the merge's dedupe key
    (g << 32 | ~ordered(value)), so descending = ascending g, best value first.
    USE_COUNT: the row holds min(count[row], n) pairs (the sample's gathered
    candidates); chunks past them are left unwritten (_rank_scatter_kernel, told the
    same count, reads none of them)."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    if USE_COUNT:
        if c * CH >= tl.minimum(tl.load(count_ptr + row), n):
            return
    i = tl.arange(0, CH)
    j = c * CH + i
    m = j < n
    g = tl.load(src_idx + row.to(tl.int64) * s_si + j, mask=m, other=-1)
    v = tl.load(src_val + row.to(tl.int64) * s_sv + j, mask=m, other=0.0)
    valid = m & (g >= 0)
    sord = _f32_to_sord(v)
    if MODE == 0:
        key = _make_key(sord, g, valid, TIE_LOW)
    elif MODE == 1:
        key = ((2147483647 - g.to(tl.int64)) << 32) | (sord.to(tl.int64) & LOW32)
        key = tl.where(valid, key, INT64_MIN)
    else:
        pk = (g.to(tl.int64) << 32) | ((sord.to(tl.int64) + 2147483648) ^ LOW32)
        key = tl.where(valid, ~pk, INT64_MIN)
    key = tl.sort(key, descending=True)
    tl.store(dst_ptr + row.to(tl.int64) * nch * CH + j, key)


@_jit
def _merge_dedupe_kernel(src_ptr, dst_ptr, nch, TIE_LOW,
                         CH: tl.constexpr, LOG_CH: tl.constexpr):
    """Chunks of NOT dedupe keys (from _sort_chunks_kernel MODE 2) -> chunks of rank
    keys sorted descending, INT64_MIN for dropped copies. A copy is kept iff it is
    the first of its index in its chunk and no other chunk holds the same index
    with a higher value (or the same value in a lower chunk)."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    i = tl.arange(0, CH)
    base = src_ptr + row.to(tl.int64) * nch * CH
    x = tl.load(base + c * CH + i)
    valid = x != INT64_MIN
    pk = ~x
    g = (pk >> 32).to(tl.int32)
    prev = ~tl.load(base + c * CH + i - 1, mask=i > 0, other=INT64_MIN)
    keep = valid & ((i == 0) | ((prev >> 32).to(tl.int32) != g))
    # first key of index g in chunk b: position = count of keys with pk < g << 32
    probe = ~(g.to(tl.int64) << 32)
    for b in range(0, nch):
        p = _count_gt(base + b * CH, probe, CH, LOG_CH)
        e = ~tl.load(base + b * CH + tl.minimum(p, CH - 1))
        e_ok = (p < CH) & (e != INT64_MAX) & ((e >> 32).to(tl.int32) == g)
        keep = keep & ~(e_ok & ((e < pk) | ((e == pk) & (b < c))))
    sord = (((pk & LOW32) ^ LOW32) - 2147483648).to(tl.int32)
    key = _make_key(sord, g, keep, TIE_LOW)
    key = tl.sort(key, descending=True)
    tl.store(dst_ptr + row.to(tl.int64) * nch * CH + c * CH + i, key)


@_jit
def _rank_scatter_kernel(src_ptr, nch, idx_ptr, s_oi, val_ptr, s_ov, k, count_ptr, USE_COUNT,
                         TIE_LOW, MODE, WRITE_VALS,
                         CH: tl.constexpr, LOG_CH: tl.constexpr, PB: tl.constexpr):
    """Global rank of every key of a row's descending-sorted chunks (its position in
    its chunk plus, per other chunk, a binary-search count of larger keys); keys
    of rank < k are written to that slot (MODE 0: rank keys, MODE 1: index-order
    keys), slots [valid keys, k) get -1 / -inf. USE_COUNT: only the chunks that
    hold the row's min(count[row], nch CH) keys are read (see _sort_chunks_kernel)."""
    row = tl.program_id(0)
    c = tl.program_id(1)
    i = tl.arange(0, CH)
    base = src_ptr + row.to(tl.int64) * nch * CH
    nb = c * 0 + nch  # chunks that hold keys
    if USE_COUNT:
        nb = (tl.minimum(tl.load(count_ptr + row), nch * CH) + (CH - 1)) // CH
    x = tl.load(base + c * CH + i, mask=(i * 0 + c) < nb, other=INT64_MIN)
    valid = x != INT64_MIN
    rank = i
    nvalid = tl.sum(valid.to(tl.int32), 0) * 0
    for b in range(0, nb):
        nvalid += tl.sum((tl.load(base + b * CH + i) != INT64_MIN).to(tl.int32), 0)
    for b in range(0, tl.where(c < nb, nb, 0)):  # a chunk past them has no key to rank
        cnt = _count_gt(base + b * CH, x, CH, LOG_CH)
        rank += tl.where(b == c, 0, cnt)
    if MODE == 0:
        lo = x & LOW32
        if TIE_LOW:
            g = (lo ^ LOW32).to(tl.int32)
        else:
            g = lo.to(tl.int32)
        sord = (x >> 32).to(tl.int32)
    else:
        g = (2147483647 - (x >> 32)).to(tl.int32)
        sord = (x & LOW32).to(tl.int32)
    sel = valid & (rank < k)
    orow = idx_ptr + row.to(tl.int64) * s_oi
    vrow = val_ptr + row.to(tl.int64) * s_ov
    tl.store(orow + rank, g, mask=sel)
    if WRITE_VALS:
        tl.store(vrow + rank, _sord_to_f32(sord), mask=sel)
    pcols = tl.arange(0, PB)
    for t in range(nvalid + c * PB, k, nch * PB):
        m = (t + pcols) < k
        tl.store(orow + t + pcols, tl.full([PB], -1, tl.int32), mask=m)
        if WRITE_VALS:
            tl.store(vrow + t + pcols, tl.full([PB], float("-inf"), tl.float32), mask=m)


# ---------------------------------------------------------------------------
# merge
# ---------------------------------------------------------------------------


@_jit
def _merge_kernel(in_idx_ptr, s_ii, in_val_ptr, s_iv, n, scratch_ptr, idx_ptr, s_oi, val_ptr, s_ov, k,
                  TIE_LOW, ORDER, WRITE_VALS,
                  NP: tl.constexpr, KP: tl.constexpr):
    row = tl.program_id(0)
    i = tl.arange(0, NP)
    m = i < n
    g = tl.load(in_idx_ptr + row.to(tl.int64) * s_ii + i, mask=m, other=-1)
    v = tl.load(in_val_ptr + row.to(tl.int64) * s_iv + i, mask=m, other=float("-inf"))
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
