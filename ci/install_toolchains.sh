#!/usr/bin/env bash
# Compilers the vendor packages build with on a CPU-only machine:
# nvcc (already on the project's machines) for nvidia-sm100, and Debian's
# clang/lld/llvm 22 for the amd-gfx950 code objects. Idempotent.
set -euo pipefail
need=()
command -v clang++-22 >/dev/null || need+=(clang-22)
command -v ld.lld-22 >/dev/null || need+=(lld-22)
command -v llvm-readelf-22 >/dev/null || need+=(llvm-22)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v nvcc >/dev/null && nvcc --version | tail -1 || echo "nvcc not found: nvidia-sm100 will be skipped"
clang++-22 --version | head -1
