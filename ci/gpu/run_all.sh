#!/usr/bin/env bash
# Everything the project checks on a GPU machine with no network (the H200 of
# the device tool), from the repository root:
#
#   bash ci/gpu/run_all.sh [STAGE ...]     stages: install suite fuzz sanitize nccl smoke bench
#                                          (default: install suite fuzz sanitize nccl smoke)
#
#   install   core + vendor packages with --no-build-isolation against the system torch
#   suite     the one conformance suite per backend (reference on CUDA, nvidia-sm100,
#             triton-portable, amd-gfx950 through its NVIDIA portability build), plus core tests
#   fuzz      ci/gpu/fuzz.py: >= 10^6 rows per dtype per native/Triton backend vs the reference
#   sanitize  compute-sanitizer memcheck + racecheck on a representative nvidia-sm100 subset
#   nccl      ci/gpu/distributed_nccl.py (needs >= 2 GPUs; skips itself otherwise)
#   smoke     ci/gpu/compat_distributed_smoke.py (adapters on CUDA, one-rank NCCL)
#   bench     ci/gpu/bench.sh (tune + bench; results laid out like the repo under $OUT/bench)
#
# Logs and results go under $OUT (default ./.gpu/out); a one-line status per step
# is printed and the script exits non-zero if any step failed. Knobs: BACKENDS,
# FUZZ_ROWS, FUZZ_SECONDS, SUITE_TIMEOUT_S, and those of the scripts it calls.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/.gpu/out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PY=${PY:-python}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export SPARSETOPK_AMD_PORTABILITY=cuda SPARSETOPK_AMD_CACHE="$OUT/amd-cache"
export SPARSETOPK_CUDA_TARGETS=${SPARSETOPK_CUDA_TARGETS:-90a}   # the device's own arch: faster build
BACKENDS=${BACKENDS:-"reference nvidia-sm100 triton-portable amd-gfx950"}
STAGES=${*:-install suite fuzz sanitize nccl smoke}
T0=$(date +%s)
rc=0
step() { echo "== [$(( $(date +%s) - T0 ))s] $*"; }
result() {  # name status
  if [ "$2" = 0 ]; then echo "   ok: $1"; else echo "   FAILED ($2): $1"; rc=1; fi
  echo "$1 $2" >> "$OUT/status.txt"
}
has() { case " $STAGES " in *" $1 "*) return 0;; esac; return 1; }

step "device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
"$PY" -c "import torch,sys; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/device.txt"

if has install; then
  step "install (no build isolation, system torch)"
  # A prebuilt nvidia-sm100 wheel for this Python (carried in .gpu/wheels, built
  # elsewhere with SPARSETOPK_CUDA_TARGETS=90a) saves the nvcc build; else build here.
  nv=./packages/nvidia-sm100
  for w in .gpu/wheels/sparsetopk_nvidia_sm100-*-cp$("$PY" -c 'import sys; print("%d%d" % sys.version_info[:2])')-*.whl; do
    [ -f "$w" ] && nv=$w
  done
  echo "nvidia-sm100 from $nv"
  # --force-reinstall: a warm machine may still hold another build of the
  # same version (an A/B's last wheel), which pip would otherwise keep
  "$PY" -m pip install --no-build-isolation --no-deps --force-reinstall -e shared "$nv" \
      -e packages/triton-portable -e packages/amd-gfx950 > "$OUT/install.log" 2>&1
  s=$?
  if [ "$s" = 0 ] && [ "$nv" != ./packages/nvidia-sm100 ] && ! "$PY" -c "import sparsetopk_nvidia_sm100._C" 2>>"$OUT/install.log"; then
    echo "prebuilt wheel does not load here; building"
    "$PY" -m pip install --no-build-isolation --no-deps --force-reinstall ./packages/nvidia-sm100 >> "$OUT/install.log" 2>&1
    s=$?
  fi
  result install $s
  tail -2 "$OUT/install.log"
  "$PY" -m sparsetopk info 2>&1 | tee "$OUT/info.txt"
fi

if has suite; then
  # One pytest process per (backend, file) pair, a few at a time: the oracle is
  # CPU-bound Python and the machine has 16 cores.
  step "conformance suite: $BACKENDS"
  jobs_list=()
  for b in $BACKENDS; do
    for f in tests/conformance/test_*.py; do jobs_list+=("$b:$f"); done
  done
  run_one() {
    b=${1%%:*}; f=${1#*:}; n="$b-$(basename "$f" .py)"
    timeout "${SUITE_TIMEOUT_S:-240}" "$PY" -m pytest -q -ra -p no:cacheprovider "$f" --backend "$b" > "$OUT/suite-$n.log" 2>&1
    s=$?
    echo "$n $s $(grep -E '[0-9]+ (passed|failed)' "$OUT/suite-$n.log" | tail -1)"
  }
  export -f run_one; export OUT PY SUITE_TIMEOUT_S
  printf '%s\n' "${jobs_list[@]}" | xargs -P 8 -I{} bash -c 'run_one {}' | sort | tee "$OUT/suite-summary.txt"
  bad=$(awk '$2 != 0' "$OUT/suite-summary.txt" | wc -l)
  result "suite ($(wc -l < "$OUT/suite-summary.txt") backend x file runs)" "$bad"
  timeout 200 "$PY" -m pytest -q -p no:cacheprovider tests/core tests/test_compat.py > "$OUT/core-tests.log" 2>&1
  result "core+compat tests on CUDA: $(tail -1 "$OUT/core-tests.log")" $?
fi

if has fuzz; then
  for b in $BACKENDS; do
    [ "$b" = reference ] && continue
    step "fuzz $b"
    timeout 400 "$PY" ci/gpu/fuzz.py --backend "$b" --rows "${FUZZ_ROWS:-1000000}" --seconds "${FUZZ_SECONDS:-30}" \
      --json "$OUT/fuzz-$b.json" > "$OUT/fuzz-$b.log" 2>&1
    s=$?; grep -E "^FUZZ|MISMATCH" "$OUT/fuzz-$b.log" | head -8
    result "fuzz $b" $s
  done
fi

if has sanitize && command -v compute-sanitizer >/dev/null; then
  for tool in ${SAN_TOOLS:-memcheck racecheck}; do
    step "compute-sanitizer $tool (nvidia-sm100 subset)"
    # racecheck: the whole workload without the cluster kernel (with it, racecheck
    # gave no report in 150 s), then the cluster kernel's own small cases
    variants="all"; [ "$tool" = racecheck ] && variants="--no-cluster --cluster-only"
    for args in $variants; do
      [ "$args" = all ] && args=""
      log="$OUT/sanitize-$tool${args:+-${args#--}}.log"
      timeout 150 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 "$PY" ci/gpu/nvidia_sanitize.py $args \
        > "$log" 2>&1
      s=$?; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|mismatch" "$log" | tail -3
      result "sanitize $tool $args" $s
    done
  done
fi

if has nccl && [ -f ci/gpu/distributed_nccl.py ]; then
  step "distributed over NCCL"
  timeout 240 "$PY" ci/gpu/distributed_nccl.py --out "$OUT" > "$OUT/nccl.log" 2>&1
  s=$?; tail -25 "$OUT/nccl.log"
  result "nccl" $s
fi

if has smoke; then
  step "compat + one-rank distributed smoke"
  timeout 150 "$PY" ci/gpu/compat_distributed_smoke.py --quick > "$OUT/smoke.log" 2>&1
  s=$?; tail -3 "$OUT/smoke.log"
  result smoke $s
fi

if has bench; then
  step "bench"
  OUT="$OUT/bench" PY="$PY" bash ci/gpu/bench.sh > "$OUT/bench.log" 2>&1
  s=$?; tail -30 "$OUT/bench.log"
  result bench $s
fi

step "done"
cat "$OUT/status.txt"
exit $rc
