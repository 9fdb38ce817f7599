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
# The checks live in one place: the pytest module CI runs too.
python -m pytest -q -p no:cacheprovider tests/test_nvidia_build.py
