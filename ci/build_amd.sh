#!/usr/bin/env bash
# Build the amd-gfx950 code objects (gfx950 + gfx942) with Debian's clang-22
# on a CPU-only machine and check them with llvm-objdump-22 / llvm-readelf-22:
# every kernel present for both archs, wavefront size 64, no scratch (private
# segment 0) in the hot kernels; prints VGPR/AGPR/SGPR/LDS use per kernel.
# Idempotent; run from anywhere. Then installs the package so its tests run:
#   bash ci/build_amd.sh && python -m pytest tests/test_amd_build.py
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/install_toolchains.sh

PY=${PY:-python3}
# The package's own build step (the same one its setup.py hook runs).
"$PY" packages/amd-gfx950/src/sparsetopk_amd/build.py
"$PY" packages/amd-gfx950/src/sparsetopk_amd/build.py --check
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  "$PY" -m pip install -q --no-build-isolation --no-deps -e packages/amd-gfx950
fi
