#!/usr/bin/env bash
# The amd-gfx950 kernels' logic on an NVIDIA GPU (the project runs it on the
# H200): the same kernel source built by nvcc at wave32 and launched through
# cuda.bindings by the package's own Python launch path, opt-in with
# SPARSETOPK_AMD_PORTABILITY=cuda. Never a substitute for a run on AMD
# hardware: the wave64 specialisations only run on the CPU emulator.
#
#   pip install --no-build-isolation --no-deps -e shared -e packages/amd-gfx950
#   bash ci/gpu/amd_portability.sh
#
# Steps (each logged under $OUT/logs, each bounded; a failing step does not stop the next):
#   1. nvcc build of the portability cubin (sm of the device)
#   2. the conformance suite:  pytest tests/conformance --backend amd-gfx950
#   3. fuzz against the reference backend: FUZZ_ROWS rows per dtype, narrow bands
#   4. a few timings beside reference and torch.topk
# Knobs: OUT, PY, SUITE_TIMEOUT_S (150), FUZZ_ROWS (1000000), FUZZ_BUDGET_S (75), FUZZ_CELLS (20000000 elements per chunk), BENCH=1.
set -u
PY=${PY:-python}
OUT=${OUT:-./.gpu/amd-portability-out}
mkdir -p "$OUT/logs"
export SPARSETOPK_AMD_PORTABILITY=cuda
export SPARSETOPK_AMD_CACHE=${SPARSETOPK_AMD_CACHE:-$OUT/cache}
rc=0

echo "== build (nvcc, wave32)"
"$PY" - <<'PYEOF' 2>&1 | tee "$OUT/logs/build.log"
import time, torch
from sparsetopk_amd import build
t = time.time()
maj, mino = torch.cuda.get_device_capability()
print("cubin:", build.build_cubin(f"sm_{maj}{mino}"), f"{time.time() - t:.1f}s")
from sparsetopk import registry
print("availability:", registry.availability("amd-gfx950"))
PYEOF

echo "== conformance suite (one pytest process per file, in parallel: the oracle is CPU-bound Python)"
pids=()
for f in tests/conformance/test_*.py tests/test_amd_build.py; do
  n=$(basename "$f" .py)
  timeout "${SUITE_TIMEOUT_S:-150}" "$PY" -m pytest -q -ra -p no:cacheprovider "$f" --backend amd-gfx950 \
    > "$OUT/logs/conformance-$n.log" 2>&1 &
  pids+=("$!:$n")
done
for pn in "${pids[@]}"; do
  pid=${pn%%:*}; n=${pn#*:}
  wait "$pid"; s=$?
  echo "[$n] exit $s: $(grep -E '(passed|failed|error|no tests ran)' "$OUT/logs/conformance-$n.log" | tail -1)"
  [ "$s" = 0 ] || { rc=1; grep -E '^(FAILED|ERROR)|Error' "$OUT/logs/conformance-$n.log" | head -15; }
done

echo "== fuzz"
timeout $(( ${FUZZ_BUDGET_S:-75} + 30 )) "$PY" packages/amd-gfx950/tools/fuzz.py --rows "${FUZZ_ROWS:-1000000}" \
  --budget-s "${FUZZ_BUDGET_S:-75}" --cells-elems "${FUZZ_CELLS:-20000000}" 2>&1 | tee "$OUT/logs/fuzz.log" | tail -20
s=${PIPESTATUS[0]}; echo "fuzz exit $s"; [ "$s" = 0 ] || rc=1

if [ "${BENCH:-1}" = 1 ]; then
  echo "== bench"
  timeout 60 "$PY" packages/amd-gfx950/tools/bench.py 2>&1 | tee "$OUT/logs/bench.log"
fi
exit $rc
