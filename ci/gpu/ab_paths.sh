#!/usr/bin/env bash
# A/B timing of nvidia-sm100 kernel paths on the GPU: the benchmark command
# (CUDA-graph replay over rotating buffers past L2, median per call) once per
# SPARSETOPK_NV_PATH value, on the fp32 N(0,1) anchor cells.
#   AB_PATHS="auto no-cluster" AB_BUDGET=40 bash ci/gpu/ab_paths.sh
# Assumes the backend is installed (ci/gpu/iterate_nvidia.sh does that).
set -uo pipefail
cd "$(dirname "$0")/../.."
R=${AB_OUT:-${OUT:-$PWD/gpu-out}}; mkdir -p "$R"
for path in ${AB_PATHS:-auto no-cluster}; do
  tag=${path//[,=]/_}
  SPARSETOPK_NV_PATH=$path timeout ${AB_TIMEOUT:-120} python -m sparsetopk bench --scenario ${AB_SCEN:-anchor} \
    --backend nvidia-sm100 --no-baselines --no-eager --dtype ${AB_DTYPE:-float32} --dist normal \
    --budget ${AB_BUDGET:-40} --json "$R/ab-$tag.json" > "$R/ab-$tag.log" 2>&1
  echo "== SPARSETOPK_NV_PATH=$path rc=$?"; grep -E "µs" "$R/ab-$tag.log" | head -${AB_LINES:-24}
done
