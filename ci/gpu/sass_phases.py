"""Executed instructions and stall samples of one kernel split into phases at
its STK_CLOCK marks (the `CS2R ... SR_CLOCKLO` reads that the stamp code
compiles to), from `ncu --page source --print-source sass --csv` (the
SourceCounters section), as ci/gpu/sass_top.py reads it.

    python ci/gpu/sass_phases.py prof/prefill_sass_float32.csv

A phase is the SASS between two consecutive marks in address order; code the
compiler placed out of line (a fallback after the kernel's last mark) counts
in the last segment. Good enough to tell a gather loop from a select.
"""
import sys

from sass_top import INST_COLS, STALL_COLS, _find, _num, load


def main():
    header, rows = load(sys.argv[1])
    src, stall, inst = _find(header, ("Source",)), _find(header, STALL_COLS), _find(header, INST_COLS)
    if stall is None or inst is None:
        raise SystemExit(f"columns not found; header: {header}")
    tot_i = sum(_num(r[inst]) for r in rows) or 1.0
    tot_s = sum(_num(r[stall]) for r in rows) or 1.0
    segs, cur = [], {"mark": "entry", "i": 0.0, "s": 0.0, "lines": 0}
    for r in rows:
        if "SR_CLOCKLO" in r[src]:
            segs.append(cur)
            cur = {"mark": f"mark {len(segs)}", "i": 0.0, "s": 0.0, "lines": 0}
        cur["i"] += _num(r[inst])
        cur["s"] += _num(r[stall])
        cur["lines"] += 1
    segs.append(cur)
    print(f"{len(rows)} SASS lines, {tot_i:.0f} warp instructions, {tot_s:.0f} stall samples")
    for g in segs:
        print(f"{g['mark']:>8}: {g['lines']:5d} lines  {100 * g['i'] / tot_i:5.1f}% inst  {100 * g['s'] / tot_s:5.1f}% stalls")


if __name__ == "__main__":
    main()
