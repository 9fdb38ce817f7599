#!/usr/bin/env bash
# nvidia-sm100 on the H200 (through the device tool), one command:
#   build (sm_90a only, fast), exactness vs the reference backend, graph/stream,
#   the conformance suite for this backend, compute-sanitizer on a subset, timings.
# Env: NV_QUICK=1 (smaller sweep), NV_SAN=1 (memcheck+racecheck), NV_CONF=0 (skip suite),
#      NV_BENCH=0 (skip timings). Logs under $OUT (default ./gpu-out).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader || true
export SPARSETOPK_CUDA_TARGETS=${SPARSETOPK_CUDA_TARGETS:-90a} SPARSETOPK_CUDA_PTX=${SPARSETOPK_CUDA_PTX:-0}
export SPARSETOPK_NVCC_THREADS=${SPARSETOPK_NVCC_THREADS:-4}
# "python -m pip": a bare "pip" may belong to another interpreter
python -c "import sparsetopk" 2>/dev/null || python -m pip install --no-build-isolation --no-deps -e shared > "$OUT/pip_shared.log" 2>&1
python -c "import sparsetopk" 2>/dev/null || export PYTHONPATH="$PWD/shared/src${PYTHONPATH:+:$PYTHONPATH}"
python -c "import sparsetopk; print('core', sparsetopk.__file__)"
if ! python -m pip install -v --no-build-isolation --no-deps ./packages/nvidia-sm100 > "$OUT/build.log" 2>&1; then
  # No usable scikit-build-core here: build the same CMake project directly and
  # stage the package (with its entry point) on PYTHONPATH.
  echo "pip build failed (see build.log); building with cmake directly"
  python -c "import scikit_build_core.build" > "$OUT/skbuild_import.log" 2>&1 || tail -3 "$OUT/skbuild_import.log"
  B=/tmp/stk-nv-build; STAGE=/tmp/stk-nv-stage; rm -rf "$STAGE"; mkdir -p "$STAGE"
  cmake -S packages/nvidia-sm100 -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python)" -Dpybind11_DIR="$(python -m pybind11 --cmakedir)" \
    > "$OUT/cmake.log" 2>&1 && cmake --build "$B" >> "$OUT/cmake.log" 2>&1 \
    || { tail -40 "$OUT/cmake.log"; echo "BUILD FAILED"; exit 2; }
  cp -r packages/nvidia-sm100/src/sparsetopk_nvidia_sm100 "$STAGE/"
  cp "$B"/_C*.so "$STAGE/sparsetopk_nvidia_sm100/"
  D="$STAGE/sparsetopk_nvidia_sm100-0.1.0.dist-info"; mkdir -p "$D"
  printf 'Metadata-Version: 2.1\nName: sparsetopk-nvidia-sm100\nVersion: 0.1.0\n' > "$D/METADATA"
  printf '[sparsetopk.backends]\nnvidia-sm100 = sparsetopk_nvidia_sm100:backend\n' > "$D/entry_points.txt"
  export PYTHONPATH="$STAGE${PYTHONPATH:+:$PYTHONPATH}"
  python -c "import sparsetopk_nvidia_sm100._C as c; print('staged', c.__file__)"
fi
echo "build done in $(( $(date +%s) - T0 ))s"
rc=0
Q=""; [ "${NV_QUICK:-0}" = 1 ] && Q="--quick"
timeout "${NV_CORR_TIMEOUT:-150}" python ci/gpu/nvidia_dev.py $Q --no-bench --out "$OUT" 2>&1 | tee "$OUT/correctness.log" | grep -v "^BENCH" | tail -60
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
echo "correctness done at $(( $(date +%s) - T0 ))s"
if [ "${NV_BENCH:-1}" = 1 ]; then
  timeout "${NV_BENCH_TIMEOUT:-100}" python ci/gpu/nvidia_dev.py --bench-only --out "$OUT" 2>&1 | tee "$OUT/bench.log" | grep -E "BENCH|Error|error" | tail -30
fi
if [ "${NV_CONF:-1}" = 1 ] && [ -d tests/conformance ]; then
  timeout "${NV_CONF_TIMEOUT:-120}" python -m pytest tests/conformance --backend nvidia-sm100 -q --maxfail=15 -p no:cacheprovider \
    > "$OUT/conformance.log" 2>&1; echo "conformance rc=$?"; tail -15 "$OUT/conformance.log"
fi
if [ "${NV_SAN:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in ${NV_SAN_TOOLS:-memcheck racecheck}; do
    timeout "${NV_SAN_TIMEOUT:-80}" compute-sanitizer --tool $tool --error-exitcode 9 python ci/gpu/nvidia_sanitize.py \
      > "$OUT/sanitize_$tool.log" 2>&1; echo "sanitizer $tool rc=$?"; tail -4 "$OUT/sanitize_$tool.log"
  done
fi
echo "total $(( $(date +%s) - T0 ))s rc=$rc"
exit $rc
