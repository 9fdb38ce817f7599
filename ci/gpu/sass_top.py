"""The hottest SASS lines of one kernel from `ncu --page source --print-source sass --csv`
(the SourceCounters section): by warp stall samples, with each line's share of the
kernel's samples and of its executed instructions.

    python ci/gpu/sass_top.py prof/split_final_sass.csv [N]

ncu prints its own log lines before the table; the table starts at the header row
that names both an address and the source column. Column names differ between ncu
versions, so they are matched by substring; when one is missing the header is
printed instead, to adapt the patterns.
"""
import csv
import sys

STALL_COLS = ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All")
INST_COLS = ("Instructions Executed", "inst_executed")


def _num(v):
    try:
        return float(str(v).replace(",", ""))
    except ValueError:
        return 0.0


def _find(header, names):
    for name in names:
        for i, h in enumerate(header):
            if name.lower() in h.lower():
                return i
    return None


def load(path):
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    start = next((i for i, ln in enumerate(lines) if "Address" in ln and "Source" in ln), None)
    if start is None:
        raise SystemExit(f"{path}: no header row with Address and Source (ncu failed? see the file)")
    rows = list(csv.reader(lines[start:]))
    return rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    header, rows = load(path)
    src, stall, inst = _find(header, ("Source",)), _find(header, STALL_COLS), _find(header, INST_COLS)
    if stall is None or inst is None:
        print(f"{path}: columns not found; header: {header}")
        return
    addr = _find(header, ("Address",))
    tot_s = sum(_num(r[stall]) for r in rows) or 1.0
    tot_i = sum(_num(r[inst]) for r in rows) or 1.0
    print(f"{path}: {len(rows)} SASS lines, {tot_s:.0f} stall samples, {tot_i:.0f} warp instructions")
    for r in sorted(rows, key=lambda r: -_num(r[stall]))[:n]:
        print(f"{100 * _num(r[stall]) / tot_s:5.1f}% stalls {100 * _num(r[inst]) / tot_i:5.1f}% inst"
              f"  {r[addr] if addr is not None else '':>6}  {r[src].strip()}")


if __name__ == "__main__":
    main()
