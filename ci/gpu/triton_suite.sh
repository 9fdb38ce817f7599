#!/bin/bash
# triton-portable on one GPU in one call (<= 8 min): the conformance suite (one
# process per file, in parallel, sharing one cold TRITON_CACHE_DIR), the backend's
# own tests, a short fuzz, then the anchor benchmark alone on a quiet GPU.
# Logs under $OUT. Usage (repo root):
#   OUT=$OUT bash ci/gpu/triton_suite.sh [suite_timeout_s=300] [bench_budget_s=120]
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
SUITE_T=${1:-300}
BENCH_B=${2:-120}
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
L="$OUT/install.log"
source ci/gpu/stage_triton.sh
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
unset TRITON_INTERPRET
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/stk_triton_cache_suite}
echo "TRITON_CACHE_DIR=$TRITON_CACHE_DIR ($(find "$TRITON_CACHE_DIR" -name '*.cubin' 2>/dev/null | wc -l) cubins before)"

# phase 1: everything that compiles, in parallel (16 cores; compiles are single-threaded)
pids=(); names=()
for f in tests/conformance/test_*.py; do
  n=$(basename "$f" .py)
  timeout "$SUITE_T" python -m pytest -q -ra "$f" --backend triton-portable -p no:cacheprovider \
    > "$OUT/logs/conf_$n.log" 2>&1 & pids+=($!); names+=("conf_$n")
done
timeout "$SUITE_T" python -m pytest -q -ra packages/triton-portable/tests -p no:cacheprovider \
  > "$OUT/logs/backend_tests.log" 2>&1 & pids+=($!); names+=(backend_tests)
timeout "$SUITE_T" python ci/gpu/fuzz.py --backend triton-portable --rows "${FUZZ_ROWS:-1000000}" --seconds "${FUZZ_SECONDS:-60}" \
  --json "$OUT/fuzz.json" > "$OUT/logs/fuzz.log" 2>&1 & pids+=($!); names+=(fuzz)
fail=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  [ $rc -ne 0 ] && fail=1
  echo "== ${names[$i]} rc=$rc (${rc/124/TIMEOUT}) at $(el)s: $(tail -1 "$OUT/logs/${names[$i]}.log")"
done
grep -hE "^(FAILED|ERROR)" "$OUT"/logs/conf_*.log "$OUT/logs/backend_tests.log" | head -20
tail -4 "$OUT/logs/fuzz.log"
echo "== phase 1 done at $(el)s; $(find "$TRITON_CACHE_DIR" -name '*.cubin' | wc -l) cubins in the cache"

# phase 2: the anchor cells, timed alone
timeout $(( BENCH_B + 90 )) python -m sparsetopk.cli bench --scenario anchor --backend triton-portable \
  --dtype float32 --dist normal --budget "$BENCH_B" > "$OUT/logs/bench_anchor.log" 2>&1
echo "== bench rc=$? at $(el)s"
tail -30 "$OUT/logs/bench_anchor.log"
echo "total $(el)s"
exit $fail
