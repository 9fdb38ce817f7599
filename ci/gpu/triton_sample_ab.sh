#!/usr/bin/env bash
# triton-portable's sample scheme on a GPU: its tests, then bench_triton's long-row
# cells under the defaults and with each of the sample's knobs turned back, in one call:
#   fallback_rows_div=8       the radix fallback split as if 1/8 of the rows were flagged
#   sample_gate_max_rows=0    no device-side gate on valid columns
#   sample_min_above=0        the estimate's old target (few samples above it at k <= 512)
# Run from the repository root: OUT=<dir> bash ci/gpu/triton_sample_ab.sh (AB_QUICK=1: the
# first two runs only, ~6 min instead of ~9). Per-run JSON under $OUT.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.gpu/triton-ab}; mkdir -p "$OUT"
L=$OUT/install.log; source ci/gpu/stage_triton.sh
nvidia-smi --query-gpu=name --format=csv,noheader
cd packages/triton-portable
show() { python -c "
import sys, json
for l in sys.stdin:
    if not l.startswith('{'): print(l.rstrip()); continue
    r = json.loads(l); print(r['cell'], r['scheme'], r['us'], 'torch', r['torch_us'], 'fallback rows', r.get('fallback_rows'), 'exact', r['exact'])"; }
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_triton_portable.py -k "sample or radix or scheme" 2>&1 | tail -3
ab() {  # timeout cells config
  echo "== --cells $2 ${3:+--config $3}"
  timeout "$1" python bench/bench_triton.py --cells "$2" --schemes auto ${3:+--config $3} \
    --json "$OUT/ab-$2-${3:-default}.json" 2>&1 | grep -E '^\{|EXACT|Error' | show
}
ab 150 large,long ""
ab 120 large,long fallback_rows_div=8
[ "${AB_QUICK:-0}" = 1 ] && exit 0  # a short device budget: the tests, defaults and div = 8 only
ab 90 large sample_gate_max_rows=0
ab 70 long sample_min_above=0
