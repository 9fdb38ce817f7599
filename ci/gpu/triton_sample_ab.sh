#!/usr/bin/env bash
# triton-portable's sample scheme on a GPU: its tests, then bench_triton's long-row
# cells (radix beside the automatic pick) under the defaults and with one of the
# sample's knobs turned back, on the same draws (--seed):
#   fallback_miss_div=1       rows the estimate missed split as for all rows (as before)
#   sample_sort_by_count=0    the candidate sort and rank over every capacity slot
#   sample_gate_max_rows=0    no device-side gate on valid columns
#   sample_min_above=0        the estimate's old target (few samples above it at k <= 512)
# Run from the repository root: OUT=<dir> bash ci/gpu/triton_sample_ab.sh (AB_QUICK=1:
# the tests, fallback_miss_div and sample_sort_by_count only, ~2 min). Per-run JSON under $OUT.
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
    r = json.loads(l); print(r['cell'], r['scheme'] if r.get('forced') in (None, 'auto') else 'forced ' + r['forced'], r['us'], 'torch', r['torch_us'], 'fallback rows', r.get('fallback_rows'), 'exact', r['exact'])"; }
timeout 120 python -m pytest -q -p no:cacheprovider tests/test_triton_portable.py -k "sample or radix or scheme" 2>&1 | tail -3
ab() {  # timeout cells config seed [schemes]
  echo "== --cells $2 ${3:+--config $3} --seed $4 ${5:+--schemes $5}"
  timeout "$1" python bench/bench_triton.py --cells "$2" --schemes "${5:-auto}" ${3:+--config $3} \
    --seed "$4" --json "$OUT/ab-${2//,/-}-${3//=/}-$4.json" 2>&1 | grep -E '^\{|EXACT|Error' | show
}
ab 150 large,long "" 0 auto,radix
ab 120 large,long fallback_miss_div=1 0
ab 120 large,long "" 1
ab 120 large,long fallback_miss_div=1 1
ab 120 large,long sample_sort_by_count=0 0
[ "${AB_QUICK:-0}" = 1 ] && exit 0  # a short device budget
ab 90 large sample_gate_max_rows=0 0
ab 70 long sample_min_above=0 0
