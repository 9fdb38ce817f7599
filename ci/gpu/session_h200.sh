#!/usr/bin/env bash
# One device call that re-verifies every backend and refreshes the benchmark
# results (what the closing run of a session does), within ~9 minutes:
#   1. nvidia-sm100: its GPU tests, the conformance suite, fuzz (default and
#      streamed paths), compute-sanitizer memcheck + racecheck
#   2. triton-portable: the conformance suite + its tests + fuzz (cold cache)
#   3. ci/gpu/bench.sh: tune + bench over the grid -> repo-shaped results
# Everything lands in $OUT as three tarballs (nvidia r.tgz, triton.tgz,
# bench.tgz). Knobs: SESSION_S (570), TRITON_SUITE_S (190), TUNE_BUDGET_S (30),
# BENCH_BUDGET_S (at most 200).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 ))s]"; }
FUZZ_SECONDS=${FUZZ_SECONDS:-12} OUT="$OUT" bash ci/gpu/iterate_nvidia.sh pkg suite fuzz sanitize 2>&1 \
  | grep -E "rc=|FUZZ|MISMATCH|nvidia-sm100-test|FAILED|SUMMARY|sanitize"
echo "$(el) nvidia done"
FUZZ_SECONDS=60 OUT="$OUT/triton" bash ci/gpu/triton_suite.sh "${TRITON_SUITE_S:-190}" 1 2>&1 | grep -E "^== |FAILED|ERROR|MISMATCH" | grep -v "bench"
tar czf "$OUT/triton.tgz" -C "$OUT" triton && rm -rf "$OUT/triton"
echo "$(el) triton done"
# the bench gets what is left of SESSION_S (the device call's limit minus a
# margin for packing): bench.sh writes its JSON after every cell, so a cut-off
# run keeps what it measured (render BENCHMARKS.md from it with --render)
left=$(( ${SESSION_S:-570} - ($(date +%s) - T0) ))
tb=${TUNE_BUDGET_S:-30}
bb=$(( left - tb - 80 )); [ "$bb" -gt "${BENCH_BUDGET_S:-200}" ] && bb=${BENCH_BUDGET_S:-200}
echo "$(el) bench: tune ${tb}s, bench ${bb}s, hard stop in $(( left - 15 ))s"
timeout -k 5 $(( left - 15 )) env TUNE_BUDGET_S="$tb" BENCH_BUDGET_S="$bb" OUT="$OUT/bench" \
  bash ci/gpu/bench.sh > "$OUT/bench.log" 2>&1
echo "$(el) bench rc=$?"; grep -E "targets met|NO |YES |regret|cells:" "$OUT/bench.log" | head -30
mv "$OUT/bench.log" "$OUT/bench/logs/" 2>/dev/null
tar czf "$OUT/bench.tgz" -C "$OUT" bench && rm -rf "$OUT/bench"
echo "$(el) all done"
