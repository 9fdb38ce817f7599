#!/bin/bash
# One device run: install; then, in parallel (compiles dominate, one process per core),
# the backend tests, each conformance file, a fuzz run and a compile-only pass over the
# benchmark cells; then the timed benchmark alone on a quiet GPU.
# Usage (repo root, GPU machine): bash packages/triton-portable/bench/gpu_run.sh [budget_s] [phaseA_s]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${1:-285}
PHASE_A=${2:-150}
FUZZ_ROWS=${FUZZ_ROWS:-1000000}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
L="$OUT/install.log"
source ci/gpu/stage_triton.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
export TRITON_CACHE_DIR=/tmp/sparsetopk_triton_cache
B=packages/triton-portable/bench/bench_triton.py
mkdir -p /tmp/stk_logs; rm -f /tmp/stk_logs/*
pids=()
timeout $PHASE_A python $B ${BENCH_ARGS:-} --warm > /tmp/stk_logs/warm.log 2>&1 & pids+=($!)
timeout $PHASE_A python $B --fuzz $FUZZ_ROWS > /tmp/stk_logs/fuzz.log 2>&1 & pids+=($!)
timeout $PHASE_A python -m pytest -q packages/triton-portable/tests -p no:cacheprovider > /tmp/stk_logs/backend_tests.log 2>&1 & pids+=($!)
if [ -d tests/conformance ]; then
  for f in tests/conformance/test_*.py; do
    n=$(basename $f .py)
    timeout $PHASE_A python -m pytest -q $f --backend triton-portable -p no:cacheprovider > /tmp/stk_logs/conf_$n.log 2>&1 & pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait $p; echo "pid $p rc=$?"; done
echo "== phase A done at $(( $(date +%s) - T0 ))s"
for f in /tmp/stk_logs/*.log; do echo "##### $f"; cat "$f"; done > "$OUT/phaseA.log" 2>&1
for f in /tmp/stk_logs/backend_tests.log /tmp/stk_logs/conf_*.log; do echo "-- $(basename $f): $(tail -1 $f)"; grep -E "^(FAILED|ERROR)" "$f" | head -6; done
tail -4 /tmp/stk_logs/fuzz.log; tail -2 /tmp/stk_logs/warm.log
echo "== timed benchmark (left $(left)s)"
timeout $(( $(left) - 5 )) python $B ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
grep -v "^ " "$OUT/bench.log" | tail -40
echo "total $(( $(date +%s) - T0 ))s"
