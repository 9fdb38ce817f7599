#!/usr/bin/env bash
# The amd-gfx950 HIP source through a ROCm toolchain (hipcc with the real HIP
# headers, not clang -nogpuinc): Debian's ROCm 5.2 hipcc (clang 15). That
# compiler predates gfx942/gfx950, so it builds for the nearest wave64 archs it
# knows (gfx90a, gfx940) and checks every kernel is there, wave64, no scratch.
# Not part of CI (the apt step pulls a few hundred MB); run by hand:
#   bash ci/build_amd_rocm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v hipcc >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hipcc libamdhip64-dev >/dev/null; }
bash ci/install_toolchains.sh >/dev/null   # llvm-readelf-22
src=packages/amd-gfx950/src/sparsetopk_amd/csrc/stk_amd_kernels.hip
tmp=$(mktemp -d)
bundler=$(ls /usr/lib/llvm-*/bin/clang-offload-bundler | head -1)
fail=0
for arch in ${ARCHS:-gfx90a gfx940}; do
  HIP_PLATFORM=amd hipcc -x hip --offload-arch=$arch --cuda-device-only -O3 -c \
    -Ishared/include -Ipackages/amd-gfx950/src/sparsetopk_amd/include "$src" -o "$tmp/k.o"
  "$bundler" --unbundle --type=o --input="$tmp/k.o" --targets=hipv4-amdgcn-amd-amdhsa--$arch --output="$tmp/$arch.co"
  notes=$(llvm-readelf-22 --notes "$tmp/$arch.co")
  n=$(grep -cE '\.name: +stk_' <<<"$notes")
  w=$(grep -c '\.wavefront_size: 64' <<<"$notes")
  s=$(grep -E '\.private_segment_fixed_size:' <<<"$notes" | grep -vc ': 0$' || true)
  echo "$arch: $n kernels, $w wave64, $s with scratch"
  [ "$n" -ge 8 ] && [ "$w" = "$n" ] && [ "$s" = 0 ] || fail=1
done
rm -rf "$tmp"
[ "$fail" = 0 ] && echo "ROCm hipcc build: 1 passed, 0 failed" || { echo "ROCm hipcc build: 0 passed, 1 failed"; exit 1; }
