#!/usr/bin/env bash
# One device call for nvidia-sm100 kernel work: install the carried wheel (or
# build), the package's GPU tests, anchor/icp timings, the conformance suite
# (shape-chosen paths, then with paths forced: SUITE_PATHS), fuzz (FUZZ_PATHS),
# sanitizers, A/B timing of paths (ab: ci/gpu/ab_paths.sh), the TMA
# bulk-copy gather tests + its A/B timing (bulk).
# Logs: $OUT/r.tgz. Stages as arguments (default: all).
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${OUT:-$PWD/gpu-out}/r; mkdir -p "$R"
PY=${PY:-python}
stages=${*:-"pkg bench suite block fuzz sanitize"}
has() { [[ " $stages " == *" $1 "* ]]; }
OUT="$R" BACKENDS=nvidia-sm100 bash ci/gpu/run_all.sh install > "$R/install.log" 2>&1 || tail -5 "$R/install.log"
if has pkg; then
  timeout ${PKG_TIMEOUT:-150} $PY -m pytest packages/nvidia-sm100/tests ${PKG_ARGS:-} -q -x -p no:cacheprovider > "$R/pkg.log" 2>&1
  echo "pkg tests rc=$? $(tail -1 "$R/pkg.log")"; grep -E "^(FAILED|E )" "$R/pkg.log" | head -20
fi
if has bench; then
  timeout ${BENCH_TIMEOUT:-150} $PY -m sparsetopk bench --scenario ${BENCH_SCEN:-anchor,icp} --backend nvidia-sm100 --dtype float32 \
    --dist normal --budget ${BENCH_BUDGET:-100} --no-eager --json "$R/bench.json" --markdown "$R/bench.md" > "$R/bench.log" 2>&1
  echo "bench rc=$?"; grep -E "µs|us " "$R/bench.log" | head -60
fi
if has suite; then
  OUT="$R" BACKENDS=nvidia-sm100 SUITE_TIMEOUT_S=${SUITE_TIMEOUT_S:-200} bash ci/gpu/run_all.sh suite > "$R/suite.log" 2>&1
  grep -E "nvidia|RESULT|suite" "$R/suite.log" | tail -12
fi
if has block; then
  # the conformance suite again with paths forced (SUITE_PATHS, space separated), 8 files in parallel
  for sp in ${SUITE_PATHS:-block}; do
    tag=${sp//[,=]/_}
    for f in tests/conformance/test_*.py; do
      SPARSETOPK_NV_PATH=$sp timeout ${SUITE_TIMEOUT_S:-200} $PY -m pytest "$f" --backend nvidia-sm100 -q -p no:cacheprovider \
        > "$R/suite-$tag-$(basename "$f" .py).log" 2>&1 &
    done
    wait
    echo "suite (SPARSETOPK_NV_PATH=$sp): $(tail -qn1 "$R"/suite-"$tag"-*.log | tr '\n' ' ')"
    grep -h -E "^(FAILED|E )" "$R"/suite-"$tag"-*.log | head -10
  done
fi
if has fuzz; then
  timeout 200 $PY ci/gpu/fuzz.py --backend nvidia-sm100 --rows ${FUZZ_ROWS:-1000000} --seconds ${FUZZ_SECONDS:-25} \
    --json "$R/fuzz.json" > "$R/fuzz.log" 2>&1; echo "fuzz rc=$?"; grep -E "^FUZZ|MISMATCH" "$R/fuzz.log" | head -8
  # again with paths forced (FUZZ_PATHS): every one-block row streamed through the one-read
  # online gather; every row through the cluster kernel; every call through the sampled split (balanced gather)
  for fp in ${FUZZ_PATHS:-stream,online cluster split}; do
    tag=${fp//[,=]/_}
    SPARSETOPK_NV_PATH=$fp timeout 200 $PY ci/gpu/fuzz.py --backend nvidia-sm100 --rows ${FUZZ_ROWS:-1000000} \
      --seconds ${FUZZ_SECONDS:-25} --json "$R/fuzz-$tag.json" > "$R/fuzz-$tag.log" 2>&1
    echo "fuzz ($fp) rc=$?"; grep -E "^FUZZ|MISMATCH" "$R/fuzz-$tag.log" | head -8
  done
fi
if has bulk; then
  # the TMA bulk-copy gather: its tests alone, then A/B timing
  timeout ${BULK_TIMEOUT:-180} $PY -m pytest packages/nvidia-sm100/tests/test_long_rows_gpu.py \
    -k bulk -q -x -p no:cacheprovider > "$R/bulk.log" 2>&1
  echo "bulk tests rc=$? $(tail -1 "$R/bulk.log")"; grep -E "^(FAILED|E )" "$R/bulk.log" | head -10
  AB_OUT="$R" AB_PATHS="auto cluster=2 cluster=2,bulk" AB_SCEN=anchor bash ci/gpu/ab_paths.sh
fi
if has ab; then
  AB_OUT="$R" bash ci/gpu/ab_paths.sh
fi
if has sanitize; then
  OUT="$R" SAN_TOOLS="${SAN_TOOLS:-memcheck racecheck}" bash ci/gpu/run_all.sh sanitize > "$R/san.log" 2>&1
  grep -E "SUMMARY|sanitize|mismatch" "$R/san.log" | tail -6
fi
tar czf "$R/../r.tgz" -C "$R" . && rm -rf "$R"
