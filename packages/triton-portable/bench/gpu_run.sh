#!/bin/bash
# One device run: install; then, in parallel (compiles dominate, one process per core),
# the backend tests, each conformance file and a compile-only pass over the benchmark
# cells; then the timed benchmark alone on a quiet GPU.
# Usage (repo root, GPU machine): bash packages/triton-portable/bench/gpu_run.sh [budget_s] [phaseA_s]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${1:-285}
PHASE_A=${2:-150}
T0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
pip install --no-build-isolation --no-deps -q -e shared -e packages/triton-portable > "$OUT/install.log" 2>&1 || tail -20 "$OUT/install.log"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
export TRITON_CACHE_DIR=/tmp/sparsetopk_triton_cache
B=packages/triton-portable/bench/bench_triton.py
pids=()
timeout $PHASE_A python $B ${BENCH_ARGS:-} --warm > "$OUT/warm.log" 2>&1 & pids+=($!)
timeout $PHASE_A python -m pytest -q packages/triton-portable/tests -p no:cacheprovider > "$OUT/pytest_backend.log" 2>&1 & pids+=($!)
if [ -d tests/conformance ]; then
  for f in tests/conformance/test_*.py; do
    n=$(basename $f .py)
    timeout $PHASE_A python -m pytest -q $f --backend triton-portable -p no:cacheprovider > "$OUT/conf_$n.log" 2>&1 & pids+=($!)
  done
fi
for p in "${pids[@]}"; do wait $p; done
echo "== phase A done at $(( $(date +%s) - T0 ))s"
grep -h "passed\|failed\|error" "$OUT"/pytest_backend.log "$OUT"/conf_*.log | tail -20
for f in "$OUT"/pytest_backend.log "$OUT"/conf_*.log; do echo "-- $f"; grep -E "^(FAILED|ERROR)|Error|assert" "$f" | head -8; done
tail -3 "$OUT/warm.log"
echo "== timed benchmark (left $(left)s)"
timeout $(( $(left) - 5 )) python $B ${BENCH_ARGS:-} --json "$OUT/bench.json" > "$OUT/bench.log" 2>&1
grep -v "^ " "$OUT/bench.log" | tail -40
echo "total $(( $(date +%s) - T0 ))s"
