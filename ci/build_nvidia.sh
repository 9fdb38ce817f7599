#!/usr/bin/env bash
# Build and install sparsetopk-nvidia-sm100 on any machine with nvcc (no GPU
# needed), then check from the built binary that it carries sm_90a and sm_100a
# code (and sm_103a when nvcc knows it) plus PTX, and that the backend imports
# and, without a GPU, reports itself unavailable with a reason.
#   PIP_ARGS="--no-build-isolation --no-deps" ci/build_nvidia.sh   # offline build
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "nvcc not found: skipping nvidia-sm100 build"; exit 0; }
python -m pip install ${PIP_ARGS:-} ./packages/nvidia-sm100
SO=$(python - <<'PY'
import glob, os, sparsetopk_nvidia_sm100 as m
print(glob.glob(os.path.join(os.path.dirname(m.__file__), "_C*.so"))[0])
PY
)
echo "extension: $SO"
CUOBJDUMP=$(command -v cuobjdump || true)
[ -z "$CUOBJDUMP" ] && [ -x "$(dirname "$(command -v nvcc)")/cuobjdump" ] && CUOBJDUMP="$(dirname "$(command -v nvcc)")/cuobjdump"
if [ -z "$CUOBJDUMP" ]; then
  tmp=${TMPDIR:-/tmp}/sparsetopk-cuobjdump
  [ -x "$tmp/nvidia/cu13/bin/cuobjdump" ] || python -m pip install -q --target "$tmp" nvidia-cuda-cuobjdump
  CUOBJDUMP=$(find "$tmp" -name cuobjdump -type f | head -1)
fi
elf=$("$CUOBJDUMP" --list-elf "$SO")
ptx=$("$CUOBJDUMP" --list-ptx "$SO")
echo "$elf"; echo "$ptx"
for a in sm_90a sm_100a; do
  grep -q "$a" <<<"$elf" || { echo "FAIL: no $a code in $SO"; exit 1; }
done
if nvcc --list-gpu-arch | grep -q compute_103; then
  grep -q sm_103a <<<"$elf" || { echo "FAIL: nvcc knows sm_103a but it is not in $SO"; exit 1; }
fi
grep -q "sm_90.ptx" <<<"$ptx" || { echo "FAIL: no compute_90 PTX in $SO"; exit 1; }
"$CUOBJDUMP" --dump-resource-usage "$SO" | grep -E "LOCAL:[1-9]" && { echo "FAIL: local-memory spills"; exit 1; }
python - <<'PY'
import sparsetopk.registry as r
b = r.backends()["nvidia-sm100"]
print("nvidia-sm100:", b.capabilities.describe())
print("availability:", r.availability("nvidia-sm100"))
PY
echo "nvidia-sm100 build check: 1 passed, 0 failed"
