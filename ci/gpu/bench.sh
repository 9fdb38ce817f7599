#!/usr/bin/env bash
# Benchmarks + shipped tuning defaults on a GPU (the project runs it on the H200).
#
# Run from the repository root after the packages are installed, e.g.
#   pip install --no-build-isolation --no-deps -e shared -e packages/nvidia-sm100 -e packages/triton-portable
#   bash ci/gpu/bench.sh
#
# Two timed phases, each bounded (cells run in priority order: the issue-3 anchor cells first,
# and a phase stops starting cells when its budget is spent; the cells it did not reach are
# recorded as skipped):
#   1. sparsetopk tune   over the full grid  -> the shipped table for this device
#   2. sparsetopk bench  over the full grid, with that table in effect (so the regret it
#      reports is the regret of the registry as shipped), beside torch.topk
# A backend failing in a cell is recorded in that cell, never fatal; each phase's exit status
# is logged and the script goes on.
#
# Output, under $OUT (default ./.gpu/bench-out), laid out like the repository so that the
# lead can copy it in as is (cp -r "$OUT/repo/." /work/main/):
#   repo/BENCHMARKS.md                                   generated, never hand-edited
#   repo/docs/benchmarks/<device>.json                   every number, with device/versions/command
#   repo/docs/benchmarks/*.png                           plots (if matplotlib is installed there)
#   repo/shared/src/sparsetopk/tuning/<device>.json      shipped tuning defaults
#   logs/*.log, logs/tune-raw.json                       terminal output of every step
# If matplotlib is missing on the GPU machine, regenerate plots + Markdown anywhere from the JSON:
#   python -m sparsetopk bench --render docs/benchmarks/<device>.json \
#       --plots docs/benchmarks --markdown BENCHMARKS.md
#
# Environment knobs: OUT, PY (python), TUNE_BUDGET_S (default 75), BENCH_BUDGET_S (default 180),
# TUNE_ARGS / BENCH_ARGS (extra arguments, e.g. "--scenario anchor,decode"), BENCH_CHECK=0 to
# skip comparing each backend's answer with the reference backend's, BENCH_EXPECT_SHA (the first
# 16 hex digits of the nvidia-sm100 _C the run must time: stop before timing if the installed one
# differs), BENCH_TGZ (a path: pack repo/ and logs/ into that tarball at the end and remove them;
# the device tool returns only a few files, not deep trees).
set -u

PY=${PY:-python}
OUT=${OUT:-./.gpu/bench-out}
TUNE_BUDGET_S=${TUNE_BUDGET_S:-75}
BENCH_BUDGET_S=${BENCH_BUDGET_S:-180}
TUNE_ARGS=${TUNE_ARGS:-}
BENCH_ARGS=${BENCH_ARGS:-}
BENCH_CHECK=${BENCH_CHECK:-1}

mkdir -p "$OUT/logs" "$OUT/repo/docs/benchmarks" "$OUT/repo/shared/src/sparsetopk/tuning" "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
LOGS="$OUT/logs"
status=0
t0=$(date +%s)
say() { echo "== [$(( $(date +%s) - t0 ))s] $*" | tee -a "$LOGS/steps.log"; }

say "environment"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  "$PY" -c "import torch, sys; print(sys.version); print('torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip); print('gpu', torch.cuda.is_available() and torch.cuda.get_device_name(0))"
  "$PY" -c "import matplotlib; print('matplotlib', matplotlib.__version__)" 2>&1 || true
  # which nvidia-sm100 build ran (compare with the carried wheel's _C: a warm
  # machine may hold another build of the same version)
  "$PY" -c "import hashlib, sparsetopk_nvidia_sm100._C as c; print('nvidia-sm100 _C sha256', hashlib.sha256(open(c.__file__, 'rb').read()).hexdigest()[:16], c.__file__)" 2>&1 || true
} 2>&1 | tee "$LOGS/env.log"
"$PY" -m sparsetopk info 2>&1 | tee "$LOGS/info.log"
if [ -n "${BENCH_EXPECT_SHA:-}" ] && ! grep -q "nvidia-sm100 _C sha256 ${BENCH_EXPECT_SHA:0:16}" "$LOGS/env.log"; then
  echo "installed nvidia-sm100 _C is not ${BENCH_EXPECT_SHA} (see $LOGS/env.log): not timing another build"
  exit 1
fi

SLUG=$("$PY" -c "import torch; from sparsetopk import registry, tuning; d = torch.device('cuda' if torch.cuda.is_available() else 'cpu'); print(tuning.device_slug(registry.device_name(d)))" 2>>"$LOGS/env.log")
if [ -z "$SLUG" ]; then
  echo "cannot name the device (see $LOGS/env.log)"; exit 1
fi
# Both commands run inside $OUT/repo with repository-relative paths, so the command recorded in the
# JSON / table / BENCHMARKS.md is the one a person would type at the repository root.
TABLE_REL="shared/src/sparsetopk/tuning/$SLUG.json"
RESULTS_REL="docs/benchmarks/$SLUG.json"
TABLE="$OUT/repo/$TABLE_REL"
RESULTS="$OUT/repo/$RESULTS_REL"
NOTE="Produced by ci/gpu/bench.sh: first 'sparsetopk tune --budget $TUNE_BUDGET_S --fresh --output $TABLE_REL $TUNE_ARGS', then this command with that table as the user tuning cache, so the picks and regret are those of the registry as shipped."

# The user cache of both phases lives under $OUT: phase 1 starts clean, phase 2 reads the new table
# (the cache is read before the shipped tables, so an older shipped table cannot interfere).
export SPARSETOPK_CACHE_DIR="$OUT/cache"
unset SPARSETOPK_BACKEND
rm -f "$OUT/cache/tuning-v1.json"

say "phase 1: sparsetopk tune (budget ${TUNE_BUDGET_S}s) -> $TABLE"
# shellcheck disable=SC2086
# timeout: a hung kernel must not eat the device call; both commands write their files after every
# cell, so a killed phase keeps what it measured (the budget stops starting cells; the slack is for
# the last cell, plots and startup)
(cd "$OUT/repo" && timeout -k 10 $(( TUNE_BUDGET_S + 90 )) "$PY" -m sparsetopk tune --budget "$TUNE_BUDGET_S" --fresh --output "$TABLE_REL" \
    --json "$LOGS/tune-raw.json" $TUNE_ARGS) 2>&1 | tee "$LOGS/tune.log"
rc=${PIPESTATUS[0]}
say "tune exit status $rc"
if [ "$rc" -ne 0 ]; then
  status=1
fi
if [ -s "$TABLE" ]; then
  cp "$TABLE" "$OUT/cache/tuning-v1.json"
else
  status=1
fi

say "phase 2: sparsetopk bench (budget ${BENCH_BUDGET_S}s) -> $RESULTS"
CHECK=""
[ "$BENCH_CHECK" = "1" ] && CHECK="--check"
# shellcheck disable=SC2086
(cd "$OUT/repo" && timeout -k 10 $(( BENCH_BUDGET_S + 120 )) "$PY" -m sparsetopk bench --budget "$BENCH_BUDGET_S" $CHECK --json "$RESULTS_REL" \
    --plots docs/benchmarks --markdown BENCHMARKS.md --note "$NOTE" $BENCH_ARGS) 2>&1 | tee "$LOGS/bench.log"
rc=${PIPESTATUS[0]}
say "bench exit status $rc"
if [ "$rc" -ne 0 ] || [ ! -s "$RESULTS" ]; then
  status=1
fi
if [ -s "$RESULTS" ] && [ ! -s "$OUT/repo/BENCHMARKS.md" ]; then
  # the run died after writing its JSON (written after every cell): render what there is
  (cd "$OUT/repo" && "$PY" -m sparsetopk bench --render "$RESULTS_REL" --markdown BENCHMARKS.md) 2>&1 | tee -a "$LOGS/bench.log"
fi

say "done (status $status); files:"
find "$OUT/repo" -type f | sort | tee -a "$LOGS/steps.log"
if [ -n "${BENCH_TGZ:-}" ]; then
  tar czf "$BENCH_TGZ" -C "$OUT" repo logs && rm -rf "$OUT/repo" "$OUT/logs"
fi
exit $status
